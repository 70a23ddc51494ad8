"""Response headers read without the ``email`` package when they are plain.

``http.client`` (under urllib3 and requests) hands every response's header block to
``email.parser``: a feed parser built per response, a regex per line, policy objects. For the plain
``Name: value`` lines nearly every server sends, that is a third of the CPU the HTTP client spends
on a small page, measured. ``parse_headers`` here makes the same ``HTTPMessage`` from such a block
directly, and hands anything else (a folded line, a line with no name, a bare CR, a ``From `` line:
what the feed parser treats specially) to the standard parser, so the result is the standard one
in every case. ``install()`` puts it in ``http.client``, where ``HTTPResponse.begin`` looks it up.
"""

from __future__ import annotations

import email.parser
import http.client
import re
from typing import Any

# a line the feed parser takes as one whole header: a name of its header characters (printable ASCII
# but ':'), the colon, the value with its leading blanks dropped, no line break inside (it splits lines
# at CR, LF and CRLF; the others splitlines() knows are refused too, to stay on the safe side)
_PLAIN = re.compile(r"([\x21-\x39\x3b-\x7e]+):[ \t]*([^\r\n\x0b\x0c\x1c-\x1e\x85]*)\r?\n\Z")
_END = ("\r\n", "\n", "")
_standard = http.client.parse_headers


def parse_headers(fp: Any, _class: type = http.client.HTTPMessage) -> http.client.HTTPMessage:
    """``http.client.parse_headers``: the same message, read directly when every line is plain."""
    text = b"".join(http.client._read_headers(fp)).decode("iso-8859-1")  # what the standard one reads
    fields = plain_fields(text)
    if fields is None:
        return email.parser.Parser(_class=_class).parsestr(text)
    message = _class()
    message._headers = fields  # what the feed parser's set_raw builds, one (name, value) a line
    message.set_payload("")  # nothing follows the blank line: the feed parser's empty body
    return message


def plain_fields(text: str) -> list[tuple[str, str]] | None:
    """The (name, value) of each line of a header block ending in a blank line (or the end), or None
    when one line is not plain."""
    fields = []
    for line in text.splitlines(keepends=True):
        if line in _END:
            break
        match = _PLAIN.match(line)
        if match is None:
            return None
        fields.append((match[1], match[2]))
    return fields


def install() -> None:
    """Read plain response headers directly in this process (idempotent)."""
    http.client.parse_headers = parse_headers  # type: ignore[assignment]


def uninstall() -> None:
    http.client.parse_headers = _standard  # type: ignore[assignment]
