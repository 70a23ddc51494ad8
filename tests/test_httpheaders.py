"""Response headers read directly make the message the standard parser makes, for plain blocks and
for every kind of line it treats specially (those go to it)."""

from __future__ import annotations

import http.client
import io

import pytest

from crawltasks.http import headers as httpheaders

BLOCKS = [
    b"Content-Type: text/html\r\nContent-Length: 12\r\n\r\n",
    b"Server: nginx\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-Empty:\r\nX-Blank: \t \r\n\r\n",
    b"Location:\t  /next?a=1  \r\nETag: \"abc\"\r\n\r\n",  # leading blanks dropped, trailing kept
    b"Lf-Only: yes\nOther: 1\n\n",
    b"Latin: caf\xe9 \xff\r\n\r\n",
    b"No-End: 1\r\n",  # the connection closed before the blank line
    b"\r\n",  # no header at all
    b"Folded: one\r\n two\r\n\r\n",  # a continuation line
    b"Bare: a\rb\r\n\r\n",  # a CR inside a value
    b"Odd: a\x0bb\x85c\r\n\r\n",  # characters splitlines() breaks at
    b"no colon here\r\nX: 1\r\n\r\n",
    b": no name\r\n\r\n",
    b"From nobody\r\nX: 1\r\n\r\n",
    b"Spaced Name: 1\r\n\r\n",
    b"X: 1\r\n\t\r\n\r\n",
]


def parsed(block: bytes, parse) -> http.client.HTTPMessage:
    return parse(io.BytesIO(block + b"BODY"))


@pytest.mark.parametrize("block", BLOCKS)
def test_the_message_is_the_standard_parsers(block):
    mine, standard = parsed(block, httpheaders.parse_headers), parsed(block, httpheaders._standard)
    assert type(mine) is type(standard)
    assert mine._headers == standard._headers
    assert mine.items() == standard.items()
    assert mine.get_payload() == standard.get_payload()
    assert [type(d) for d in mine.defects] == [type(d) for d in standard.defects]
    assert mine.get_content_type() == standard.get_content_type()


def test_plain_blocks_are_read_directly_and_the_rest_by_the_standard_parser():
    assert httpheaders.plain_fields("A: 1\r\nB:2\r\n\r\n") == [("A", "1"), ("B", "2")]
    for block in (b"Folded: one\r\n two\r\n\r\n", b"Bare: a\rb\r\n\r\n", b"From nobody\r\n\r\n"):
        assert httpheaders.plain_fields(block.decode("iso-8859-1")) is None


def test_installed_in_http_client_and_taken_out_again():
    before = http.client.parse_headers
    try:
        httpheaders.install()
        assert http.client.parse_headers is httpheaders.parse_headers
        httpheaders.uninstall()
        assert http.client.parse_headers is httpheaders._standard
    finally:
        http.client.parse_headers = before
