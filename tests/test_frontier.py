from crawltasks.frontier.dispatcher import batches
from crawltasks.frontier.queues import decode, encode
from crawltasks.frontier.schedule import backoff, plan_requests
from crawltasks.models import Request
from crawltasks.settings import CrawlOptions


def test_plan_filters_by_depth_domain_and_scheme_and_keeps_invalid_urls_to_fail_once():
    opts = CrawlOptions(max_depth=1, allowed_domains=["site.com"])
    reqs = [
        Request("http://site.com/a", depth=1), Request("http://sub.site.com/b", depth=0),
        Request("http://site.com/deep", depth=2), Request("http://other.com/", depth=0),
        Request("ftp://site.com/f"), Request("http://site.com:99999/bad"),
    ]
    plan = plan_requests(reqs, opts)
    assert [r.url for r in plan.accepted] == ["http://site.com/a", "http://sub.site.com/b", "http://site.com:99999/bad"]
    assert dict(plan.filtered) == {"depth": 1, "offsite": 1, "scheme": 1}
    assert all(len(r.fp) == 40 for r in plan.accepted)


def test_depth_limit_is_inclusive_and_none_means_unlimited():
    assert len(plan_requests([Request("http://s.com/", depth=3)], CrawlOptions(max_depth=3)).accepted) == 1
    assert len(plan_requests([Request("http://s.com/", depth=99)], CrawlOptions()).accepted) == 1


def test_dispatched_requests_go_in_batches_by_priority():
    reqs = [Request(f"http://a.com/{i}") for i in range(5)] + [Request(f"http://b.com/{i}") for i in range(3)]
    reqs += [Request("http://c.com/urgent", priority="high")]
    entries = [(f"l{i}", r.priority, encode(r)) for i, r in enumerate(reqs)]
    sent = [(prio, [decode(e).url for _, _, e in batch]) for prio, batch in batches(entries, 4)]
    assert sent[0] == ("high", ["http://c.com/urgent"])
    assert [len(b) for _, b in sent] == [1, 4, 4]
    assert sum(len(b) for _, b in sent) == 9


def test_backoff_grows_honours_retry_after_and_stays_under_the_cap():
    opts = CrawlOptions(retry_base=1.0, retry_cap=30.0)
    assert 0.8 <= backoff(0, opts) <= 1.2
    assert 6.4 <= backoff(3, opts) <= 9.6
    assert backoff(20, opts) == 30.0
    assert backoff(0, opts, retry_after=12) >= 12
    assert backoff(0, opts, retry_after=3600) == 30.0


def test_known_links_are_dropped_without_asking_redis_again(state):
    """Links this process saw scheduled are duplicates at once; counters stay exact."""
    import uuid

    from crawltasks import runtime
    from crawltasks.backends.redis.frontier import RedisFrontier
    from crawltasks.frontier.schedule import schedule

    KNOWN = runtime.current().caches.known  # what this process knows seen

    crawl_id = f"known-{uuid.uuid4().hex[:8]}"
    opts = CrawlOptions(batch_size=100)
    state.create_crawl(crawl_id, opts.to_dict(), ["http://k.test/"])
    asked: list[int] = []
    real = state.seen_already
    state.seen_already = lambda cid, fps: asked.append(len(fps)) or real(cid, fps)
    frontier = RedisFrontier(state.r)
    links = [Request(f"http://k.test/{i}") for i in range(30)]
    assert schedule(state, frontier, crawl_id, links, opts) == 30
    again = [Request(f"http://k.test/{i}") for i in range(40)]  # 30 known, 10 new
    assert schedule(state, frontier, crawl_id, again, opts) == 10
    assert asked == [30, 10]  # the second time only the 10 unknown ones went to Redis
    assert state.stats(crawl_id)["duplicates"] == 30 and frontier.sizes(crawl_id).queued == 40
    KNOWN.limit, saved = 5, KNOWN.limit  # past the bound everything is forgotten, never wrongly kept
    try:
        KNOWN.add(crawl_id, ["x"])
        assert KNOWN.of(crawl_id) == set()
    finally:
        KNOWN.limit = saved
    state.delete_crawl(crawl_id)
