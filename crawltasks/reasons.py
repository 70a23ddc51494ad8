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

# reason -> (outcome, one-line meaning). ``http_<status>`` stands for every status of 400 and above.
class Reason(StrEnum):
    """The reason a request ended failed or skipped (``HTTP_STATUS`` stands for ``http_<status>``:
    ``http_reason(status)`` spells one)."""

    HTTP_STATUS = "http_<status>"
    TIMEOUT = "timeout"
    TOO_SLOW = "too_slow"
    CONNECTION_ERROR = "connection_error"
    DNS_ERROR = "dns_error"
    INCOMPLETE_BODY = "incomplete_body"
    BAD_RESPONSE = "bad_response"
    BAD_REDIRECT = "bad_redirect"
    SSL_ERROR = "ssl_error"
    DECODING_ERROR = "decoding_error"
    INVALID_URL = "invalid_url"
    REDIRECT_LOOP = "redirect_loop"
    TOO_MANY_REDIRECTS = "too_many_redirects"
    TOO_LARGE = "too_large"
    SSRF_BLOCKED = "ssrf_blocked"
    PROVIDER_ERROR = "provider_error"
    REQUEST_ERROR = "request_error"
    FETCH_ERROR = "fetch_error"
    BODY_EXPIRED = "body_expired"
    SPIDER_ERROR = "spider_error"
    HOOK_ERROR = "hook_error"
    SPIDER_NOT_FOUND = "spider_not_found"
    WORKER_LOST = "worker_lost"
    ROBOTS_DISALLOWED = "robots_disallowed"
    SKIPPED_BY_HOOK = "skipped_by_hook"
    NOT_MODIFIED = "not_modified"
    CANCELLED = "cancelled"
    DUPLICATE_REDIRECT = "duplicate_redirect"


def http_reason(status: int) -> str:
    """The reason of a final answer of 400 or above."""
    return f"http_{status}"


REASONS: dict[Reason, tuple[str, str]] = {
    Reason.HTTP_STATUS: (FAILED, "the server answered 400 or above; 408, 425, 429 and 5xx are retried first"),
    Reason.TIMEOUT: (FAILED, "no answer within the socket timeout; retried"),
    Reason.TOO_SLOW: (FAILED, "the whole response did not arrive within `timeout` (total time cap); retried"),
    Reason.CONNECTION_ERROR: (FAILED, "the connection was refused, reset or closed before an answer; retried"),
    Reason.DNS_ERROR: (FAILED, "the host name did not resolve; retried"),
    Reason.INCOMPLETE_BODY: (FAILED, "the connection ended inside the body; retried"),
    Reason.BAD_RESPONSE: (FAILED, "not a valid final HTTP answer: garbage, bad headers or body framing, a 1xx, "
                             "a 304 to a request that was not conditional"),
    Reason.BAD_REDIRECT: (FAILED, "a 3xx answer with no `Location` to follow"),
    Reason.SSL_ERROR: (FAILED, "TLS failed: a bad certificate, or no TLS handshake at all (a plain HTTP port)"),
    Reason.DECODING_ERROR: (FAILED, "the body does not decode with its `Content-Encoding`"),
    Reason.INVALID_URL: (FAILED, "the URL, or a redirect's target, cannot be fetched as it is written"),
    Reason.REDIRECT_LOOP: (FAILED, "a redirect leads back to a URL of the same chain"),
    Reason.TOO_MANY_REDIRECTS: (FAILED, "more than `max_redirects` redirects"),
    Reason.TOO_LARGE: (FAILED, "the body is larger than `max_size`, declared or streamed"),
    Reason.SSRF_BLOCKED: (FAILED, "the URL or a redirect resolves to a loopback, private or metadata address"),
    Reason.PROVIDER_ERROR: (FAILED, "a `user_agent_provider`, `cookie_provider` or `proxy_provider` raised"),
    Reason.REQUEST_ERROR: (FAILED, "requests refused to send the request (an error of its own, not the site's)"),
    Reason.FETCH_ERROR: (FAILED, "any other error while fetching (a bug: the message says what)"),
    Reason.BODY_EXPIRED: (FAILED, "the fetched body expired in Redis (`body_ttl`) before it was parsed"),
    Reason.SPIDER_ERROR: (FAILED, "the spider's `parse` or the request's callback raised (or names no method)"),
    Reason.HOOK_ERROR: (FAILED, "`before_request`, `after_response` or `before_store` raised"),
    Reason.SPIDER_NOT_FOUND: (FAILED, "the worker cannot load the crawl's spider (module missing or broken)"),
    Reason.WORKER_LOST: (FAILED, "the request died with its worker process `max_worker_lost` times"),
    Reason.ROBOTS_DISALLOWED: (SKIPPED, "robots.txt disallows the URL"),
    Reason.SKIPPED_BY_HOOK: (SKIPPED, "`before_request` or `after_response` returned None"),
    Reason.NOT_MODIFIED: (SKIPPED, "a re-crawl (`visit_ttl`) asked conditionally and got 304: the stored page stands, "
                              "its `checked_at` moves"),
    Reason.CANCELLED: (SILENT, "the crawl was cancelled (or ran past `max_run_time`) before the request ended"),
    Reason.DUPLICATE_REDIRECT: (SILENT, "it redirected to a URL the crawl already has"),
}

SILENT_SKIPS = frozenset(r for r, (outcome, _) in REASONS.items() if outcome == SILENT)
RECORDED_SKIPS = frozenset(r for r, (outcome, _) in REASONS.items() if outcome == SKIPPED)


def markdown_table() -> str:
    """The README's table of reasons."""
    rows = [f"| `{reason}` | {outcome} | {meaning} |" for reason, (outcome, meaning) in REASONS.items()]
    return "\n".join(["| reason | outcome | meaning |", "|---|---|---|", *rows])


if __name__ == "__main__":
    print(markdown_table())
