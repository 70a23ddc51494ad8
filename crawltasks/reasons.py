"""Every reason a request can end with, and what it means: the one list the README's table is
rendered from (``python -m crawltasks.reasons``), and that tests hold the code to.

A request ends ``stored``, ``failed`` or ``skipped``. Failed ones, and skips worth explaining, are
kept in the ``failures`` collection with one of these reasons; the silent skips leave no record.
"""

from __future__ import annotations

from enum import StrEnum

FAILED = "failed"
SKIPPED = "skipped"
SILENT = "skipped, no record"


class Reason(StrEnum):
    """The reason a request ended failed or skipped, with that outcome and what it means: the table
    the README shows is these members, in this order. ``HTTP_STATUS`` stands for every
    ``http_<status>`` of 400 and above."""

    outcome: str
    meaning: str

    def __new__(cls, value: str, outcome: str, meaning: str) -> Reason:
        member = str.__new__(cls, value)
        member._value_ = value
        member.outcome, member.meaning = outcome, meaning
        return member

    HTTP_STATUS = "http_<status>", FAILED, "the server answered 400 or above; 408, 425, 429 and 5xx are retried first"
    TIMEOUT = "timeout", FAILED, "no answer within the socket timeout; retried"
    TOO_SLOW = "too_slow", FAILED, "the whole response did not arrive within `timeout` (total time cap); retried"
    CONNECTION_ERROR = "connection_error", FAILED, ("the connection was refused, reset or closed before an answer; "
                                                    "retried")
    DNS_ERROR = "dns_error", FAILED, "the host name did not resolve; retried"
    INCOMPLETE_BODY = "incomplete_body", FAILED, "the connection ended inside the body; retried"
    BAD_RESPONSE = "bad_response", FAILED, ("not a valid final HTTP answer: garbage, bad headers or body framing, a "
                                            "1xx, a 304 to a request that was not conditional")
    BAD_REDIRECT = "bad_redirect", FAILED, "a 3xx answer with no `Location` to follow"
    SSL_ERROR = "ssl_error", FAILED, "TLS failed: a bad certificate, or no TLS handshake at all (a plain HTTP port)"
    DECODING_ERROR = "decoding_error", FAILED, "the body does not decode with its `Content-Encoding`"
    INVALID_URL = "invalid_url", FAILED, "the URL, or a redirect's target, cannot be fetched as it is written"
    REDIRECT_LOOP = "redirect_loop", FAILED, "a redirect leads back to a URL of the same chain"
    TOO_MANY_REDIRECTS = "too_many_redirects", FAILED, "more than `max_redirects` redirects"
    TOO_LARGE = "too_large", FAILED, "the body is larger than `max_size`, declared or streamed"
    SSRF_BLOCKED = "ssrf_blocked", FAILED, "the URL or a redirect resolves to a loopback, private or metadata address"
    PROVIDER_ERROR = "provider_error", FAILED, "a `user_agent_provider`, `cookie_provider` or `proxy_provider` raised"
    REQUEST_ERROR = "request_error", FAILED, ("requests refused to send the request (an error of its own, not the "
                                              "site's)")
    FETCH_ERROR = "fetch_error", FAILED, "any other error while fetching (a bug: the message says what)"
    BODY_EXPIRED = "body_expired", FAILED, "the fetched body expired in Redis (`body_ttl`) before it was parsed"
    SPIDER_ERROR = "spider_error", FAILED, "the spider's `parse` or the request's callback raised (or names no method)"
    HOOK_ERROR = "hook_error", FAILED, "`before_request`, `after_response` or `before_store` raised"
    SPIDER_NOT_FOUND = "spider_not_found", FAILED, ("the worker cannot load the crawl's spider (module missing or "
                                                    "broken)")
    WORKER_LOST = "worker_lost", FAILED, "the request died with its worker process `max_worker_lost` times"
    ROBOTS_DISALLOWED = "robots_disallowed", SKIPPED, "robots.txt disallows the URL"
    SKIPPED_BY_HOOK = "skipped_by_hook", SKIPPED, "`before_request` or `after_response` returned None"
    NOT_MODIFIED = "not_modified", SKIPPED, ("a re-crawl (`visit_ttl`) asked conditionally and got 304: the stored "
                                             "page stands, its `checked_at` moves")
    CANCELLED = "cancelled", SILENT, "the crawl was cancelled (or ran past `max_run_time`) before the request ended"
    DUPLICATE_REDIRECT = "duplicate_redirect", SILENT, "it redirected to a URL the crawl already has"


REASONS: dict[Reason, tuple[str, str]] = {r: (r.outcome, r.meaning) for r in Reason}

SILENT_SKIPS = frozenset(r for r, (outcome, _) in REASONS.items() if outcome == SILENT)
RECORDED_SKIPS = frozenset(r for r, (outcome, _) in REASONS.items() if outcome == SKIPPED)


def markdown_table() -> str:
    """The README's table of reasons."""
    rows = [f"| `{reason}` | {outcome} | {meaning} |" for reason, (outcome, meaning) in REASONS.items()]
    return "\n".join(["| reason | outcome | meaning |", "|---|---|---|", *rows])


if __name__ == "__main__":
    print(markdown_table())
