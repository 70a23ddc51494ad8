"""Every Redis key name crawltasks uses, in one place. Keys of one crawl share the hash tag
``{crawl_id}``, so every script that touches them stays valid on Redis Cluster; the gate's exchange
is the exception: its script names the keys of many hosts itself (one Redis instance only)."""

from __future__ import annotations

PREFIX = "ct"


class Keys:
    """Every Redis key name crawltasks uses, in one place."""

    crawls = f"{PREFIX}:crawls"  # zset crawl_id -> start time

    @staticmethod
    def meta(crawl_id: str) -> str:  # hash: options, spider, state, started_at, finished_at
        return f"{PREFIX}:{{{crawl_id}}}:meta"

    @staticmethod
    def stats(crawl_id: str) -> str:  # hash of COUNTERS and filtered:<reason>
        return f"{PREFIX}:{{{crawl_id}}}:stats"

    @staticmethod
    def seen(crawl_id: str) -> str:  # set of fingerprints ever scheduled
        return f"{PREFIX}:{{{crawl_id}}}:seen"

    @staticmethod
    def bloom(crawl_id: str) -> str:  # Bloom-filter bitmap of fingerprints (dedupe="bloom")
        return f"{PREFIX}:{{{crawl_id}}}:bloom"

    @staticmethod
    def bloom_params(crawl_id: str) -> str:  # hash m, k of that filter (BloomFilter names it key + ":params")
        return f"{Keys.bloom(crawl_id)}:params"

    @staticmethod
    def outcome(crawl_id: str) -> str:  # hash ticket -> stored | failed | skipped ("done" = stored)
        return f"{PREFIX}:{{{crawl_id}}}:outcome"

    @staticmethod
    def body(crawl_id: str, ticket: str) -> str:  # LZ4-framed response body (backends.redis.bodies), with a TTL
        return f"{PREFIX}:{{{crawl_id}}}:body:{ticket}"

    # a host's gate keys are host_head + host + a tail; GATE_EXCHANGE (lua.py) joins these parts itself
    host_head = f"{PREFIX}:host:{{"
    host_tails = ("}:slots", "}:next", "}:backoff")  # of host_slots, host_next, host_backoff

    @staticmethod
    def host_slots(host: str) -> str:  # zset token -> lease expiry (ms): requests in flight on host
        return Keys.host_head + host + Keys.host_tails[0]

    @staticmethod
    def host_next(host: str) -> str:  # earliest time (ms) the next request may start on host
        return Keys.host_head + host + Keys.host_tails[1]

    @staticmethod
    def host_backoff(host: str) -> str:  # extra delay (ms) after 429/503 answers, decaying on success
        return Keys.host_head + host + Keys.host_tails[2]

    @staticmethod
    def hosts(crawl_id: str) -> str:  # set of "host:port" the crawl has scheduled requests for
        return f"{PREFIX}:{{{crawl_id}}}:hostset"

    @staticmethod
    def host_counts(crawl_id: str) -> str:  # hash host -> requests scheduled (max_pages_per_host)
        return f"{PREFIX}:{{{crawl_id}}}:hosts"

    # --- the per-host frontier (crawltasks.backends.redis.frontier) ---
    @staticmethod
    def queue_prefix(crawl_id: str) -> str:  # + "<host>:<h|d|l>": list of queued requests (frontier.queues.encode)
        return f"{PREFIX}:{{{crawl_id}}}:q:"

    @staticmethod
    def queues(crawl_id: str, host: str) -> list[str]:  # the host's three queues: high, default, low
        return [f"{Keys.queue_prefix(crawl_id)}{host}:{p}" for p in "hdl"]

    @staticmethod
    def ready(crawl_id: str) -> str:  # zset host -> time (ms) it may be fetched; hosts with queued requests
        return f"{PREFIX}:{{{crawl_id}}}:ready"

    @staticmethod
    def frontier(crawl_id: str) -> str:  # hash: queued, outstanding (taken, not yet fetched), seq
        return f"{PREFIX}:{{{crawl_id}}}:frontier"

    @staticmethod
    def busy(crawl_id: str) -> str:  # hash host -> the crawl's requests in flight there
        return f"{PREFIX}:{{{crawl_id}}}:busy"

    @staticmethod
    def host_next_at(crawl_id: str) -> str:  # hash host -> earliest time (ms) of its next request
        return f"{PREFIX}:{{{crawl_id}}}:hostnext"

    @staticmethod
    def host_limits(crawl_id: str) -> str:  # hash host -> "concurrency,delay_ms,random_ms" (rules, Crawl-delay)
        return f"{PREFIX}:{{{crawl_id}}}:hostlimits"

    @staticmethod
    def claims(crawl_id: str) -> str:  # hash lease -> claim of a request taken and not finished (frontier_lua)
        return f"{PREFIX}:{{{crawl_id}}}:claims"

    # --- monitoring (crawltasks.monitor.series, crawltasks.web, crawltasks.monitor.notify) ---
    @staticmethod
    def series(crawl_id: str) -> str:  # hash: outcomes over time, bounded (FINISH; monitor/series.py)
        return f"{PREFIX}:{{{crawl_id}}}:series"

    @staticmethod
    def host_done(crawl_id: str) -> str:  # hash "s:<host>" / "f:<host>" -> requests stored / failed there
        return f"{PREFIX}:{{{crawl_id}}}:hostdone"

    @staticmethod
    def notified(crawl_id: str, event: str) -> str:  # string with a TTL: a notification of event was sent
        return f"{PREFIX}:{{{crawl_id}}}:notified:{event}"

    # --- the spider API: item processors, sessions ---
    @staticmethod
    def item_keys(crawl_id: str) -> str:  # hash sha1(key fields) -> fp of the first item (items.Dedupe)
        return f"{PREFIX}:{{{crawl_id}}}:itemkeys"

    @staticmethod
    def cookies(crawl_id: str) -> str:  # hash "domain path name" -> cookie JSON, and "v" -> version (sessions)
        return f"{PREFIX}:{{{crawl_id}}}:cookies"

    # --- what expires when a crawl is finished (RedisState.retire) ---
    @staticmethod
    def summary(crawl_id: str) -> list[str]:  # kept SUMMARY_FACTOR times longer: `list` and `stats` show it
        return [Keys.meta(crawl_id), Keys.stats(crawl_id)]

    @staticmethod
    def working(crawl_id: str) -> list[str]:
        """Every other key of a crawl but its parked bodies (they expire on their own) and its host
        queues (named per host: ``queues``). A key added to a crawl belongs here or in ``summary``."""
        return [Keys.seen(crawl_id), Keys.bloom(crawl_id), Keys.bloom_params(crawl_id), Keys.outcome(crawl_id),
                Keys.hosts(crawl_id), Keys.host_counts(crawl_id), Keys.ready(crawl_id), Keys.frontier(crawl_id),
                Keys.busy(crawl_id), Keys.host_next_at(crawl_id), Keys.host_limits(crawl_id), Keys.claims(crawl_id),
                Keys.series(crawl_id), Keys.host_done(crawl_id), Keys.item_keys(crawl_id), Keys.cookies(crawl_id)]

    # --- workers ---
    workers = f"{PREFIX}:workers"  # zset worker process id -> last heartbeat (ms)
    outages = f"{PREFIX}:outages"  # hash service -> since when a worker cannot reach it (backends.redis.fleet)
    capacity = f"{PREFIX}:workers:capacity"  # hash worker id -> requests its fetch engine takes at once
    dispatcher = f"{PREFIX}:dispatcher"  # the worker that dispatches now: the leader lock "dispatcher"

    @staticmethod
    def leader(name: str) -> str:  # string with a short TTL: who holds the leader lock ``name`` (redis/fleet.py)
        return f"{PREFIX}:{name}"

    active = f"{PREFIX}:active"  # set of crawls not finished: what the reclaimer looks at

    @staticmethod
    def robots(origin: str) -> str:  # robots.txt text of scheme://host:port, with a TTL
        return f"{PREFIX}:robots:{origin}"

    @staticmethod
    def robots_lock(origin: str) -> str:  # one worker fetches a host's robots.txt at a time
        return f"{PREFIX}:robots:{origin}:lock"

    @staticmethod
    def visited(spider: str) -> str:  # zset fp -> last stored time, across crawls (visit_ttl), trimmed to it
        return f"{PREFIX}:visited:{spider}"

    @staticmethod
    def validators(spider: str) -> str:  # hash fp -> JSON [crawl id, ETag, Last-Modified, content hash] (revisit)
        return f"{Keys.visited(spider)}:validators"
