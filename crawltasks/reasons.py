"""Every reason a request can end with, and what it means: the one list the README's table is
rendered from (``python -m crawltasks.reasons``), and that tests hold the code to.

A request ends ``stored``, ``failed`` or ``skipped``. Failed ones, and skips worth explaining, are
kept in the ``failures`` collection with one of these reasons; the silent skips leave no record.
"""

from __future__ import annotations

FAILED = "failed"
SKIPPED = "skipped"
SILENT = "skipped, no record"

# reason -> (outcome, one-line meaning). ``http_<status>`` stands for every status of 400 and above.
REASONS: dict[str, tuple[str, str]] = {
    "http_<status>": (FAILED, "the server answered 400 or above; 408, 425, 429 and 5xx are retried first"),
    "timeout": (FAILED, "no answer within the socket timeout; retried"),
    "too_slow": (FAILED, "the whole response did not arrive within `timeout` (total time cap); retried"),
    "connection_error": (FAILED, "the connection was refused, reset or closed before an answer; retried"),
    "dns_error": (FAILED, "the host name did not resolve; retried"),
    "incomplete_body": (FAILED, "the connection ended inside the body; retried"),
    "bad_response": (FAILED, "not a valid final HTTP answer: garbage, bad headers or body framing, a 1xx, "
                             "a 304 to a request that was not conditional"),
    "bad_redirect": (FAILED, "a 3xx answer with no `Location` to follow"),
    "ssl_error": (FAILED, "TLS failed: a bad certificate, or no TLS handshake at all (a plain HTTP port)"),
    "decoding_error": (FAILED, "the body does not decode with its `Content-Encoding`"),
    "invalid_url": (FAILED, "the URL, or a redirect's target, cannot be fetched as it is written"),
    "redirect_loop": (FAILED, "a redirect leads back to a URL of the same chain"),
    "too_many_redirects": (FAILED, "more than `max_redirects` redirects"),
    "too_large": (FAILED, "the body is larger than `max_size`, declared or streamed"),
    "ssrf_blocked": (FAILED, "the URL or a redirect resolves to a loopback, private or metadata address"),
    "provider_error": (FAILED, "a `user_agent_provider`, `cookie_provider` or `proxy_provider` raised"),
    "request_error": (FAILED, "requests refused to send the request (an error of its own, not the site's)"),
    "fetch_error": (FAILED, "any other error while fetching (a bug: the message says what)"),
    "body_expired": (FAILED, "the fetched body expired in Redis (`body_ttl`) before it was parsed"),
    "spider_error": (FAILED, "the spider's `parse` or the request's callback raised (or names no method)"),
    "hook_error": (FAILED, "`before_request`, `after_response` or `before_store` raised"),
    "spider_not_found": (FAILED, "the worker cannot load the crawl's spider (module missing or broken)"),
    "worker_lost": (FAILED, "the request died with its worker process `max_worker_lost` times"),
    "robots_disallowed": (SKIPPED, "robots.txt disallows the URL"),
    "skipped_by_hook": (SKIPPED, "`before_request` or `after_response` returned None"),
    "not_modified": (SKIPPED, "a re-crawl (`visit_ttl`) asked conditionally and got 304: the stored page stands, "
                              "its `checked_at` moves"),
    "cancelled": (SILENT, "the crawl was cancelled (or ran past `max_run_time`) before the request ended"),
    "duplicate_redirect": (SILENT, "it redirected to a URL the crawl already has"),
}

SILENT_SKIPS = frozenset(r for r, (outcome, _) in REASONS.items() if outcome == SILENT)
RECORDED_SKIPS = frozenset(r for r, (outcome, _) in REASONS.items() if outcome == SKIPPED)


def markdown_table() -> str:
    """The README's table of reasons."""
    rows = [f"| `{reason}` | {outcome} | {meaning} |" for reason, (outcome, meaning) in REASONS.items()]
    return "\n".join(["| reason | outcome | meaning |", "|---|---|---|", *rows])


if __name__ == "__main__":
    print(markdown_table())
