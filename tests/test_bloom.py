"""The Redis Bloom filter against the test Redis (CRAWLTASKS_TEST_REDIS), in keys of its own."""

from __future__ import annotations

import hashlib
import uuid

import pytest
import redis

from crawltasks.backends.redis.bloom import BloomFilter, BloomParams, normalize


def fp(i: int, salt: str = "") -> str:
    return hashlib.sha1(f"GET http://example.test/{salt}{i}".encode()).hexdigest()


@pytest.fixture
def client(redis_url) -> redis.Redis:
    """The test Redis; every key a test makes is removed after it (keys are named per test run)."""
    c = redis.Redis.from_url(redis_url)
    yield c
    for key in c.scan_iter(match=f"{PREFIX}*"):
        c.delete(key)
    c.close()


PREFIX = f"bloomtest-{uuid.uuid4().hex[:8]}:"


def test_params_follow_the_textbook_formulas():
    p = BloomParams.for_capacity(1_000_000, 0.01)
    assert p.hashes == 7
    assert 9_585_000 < p.bits < 9_586_000  # -n ln p / ln2^2
    assert p.bits_per_item == pytest.approx(9.585, rel=1e-3)
    assert p.expected_error() == pytest.approx(0.01, rel=0.05)
    assert BloomParams.for_capacity(1_000_000, 0.001).hashes == 10
    with pytest.raises(ValueError):
        BloomParams.for_capacity(10**9, 1e-6)  # over one Redis string
    with pytest.raises(ValueError):
        BloomParams.for_capacity(10, 1.5)


def test_normalize_keeps_hex_fingerprints_and_hashes_the_rest():
    h = fp(1)
    assert normalize(h) == h
    assert normalize("not a fingerprint") == hashlib.sha1(b"not a fingerprint").hexdigest()


def test_check_and_add_flags_like_the_seen_set(client):
    bloom = BloomFilter(client, PREFIX + "{t}:bloom", capacity=1000, error_rate=0.001)
    a, b = fp(1), fp(2)
    assert bloom.check_and_add([a, b, a]) == [True, True, False]  # a repeat in one call is not new
    assert bloom.check_and_add([a, b]) == [False, False]
    assert bloom.check_and_add([a], dont_filter=[True]) == [True]  # dont_filter: always scheduled
    assert bloom.contains([a, b, fp(3)]) == [True, True, False]
    assert a in bloom and fp(3) not in bloom
    assert bloom.add(fp(3)) is True and bloom.add(fp(3)) is False
    assert bloom.check_and_add([]) == []


def test_stats_counters_match_schedule(client):
    bloom = BloomFilter(client, PREFIX + "{t}:bloom", capacity=1000)
    bloom.check_and_add([fp(1), fp(2), fp(1)], stats_key=PREFIX + "{t}:stats")
    bloom.check_and_add([fp(2)], dont_filter=[True], stats_key=PREFIX + "{t}:stats")
    stats = {k.decode(): int(v) for k, v in client.hgetall(PREFIX + "{t}:stats").items()}
    assert stats == {"scheduled": 3, "pending": 3, "duplicates": 1}


def test_memory_is_the_bitmap_size(client):
    bloom = BloomFilter(client, PREFIX + "{t}:bloom", capacity=100_000, error_rate=0.01)
    bloom.check_and_add([fp(0)])
    assert client.strlen(bloom.key) == bloom.params.bytes  # allocated once, up front
    assert bloom.params.bytes <= bloom.memory_usage() < bloom.params.bytes * 1.3


def test_a_differently_configured_worker_is_refused(client):
    BloomFilter(client, PREFIX + "{t}:bloom", capacity=1000).check_and_add([fp(1)])
    other = BloomFilter(client, PREFIX + "{t}:bloom", capacity=5000)
    with pytest.raises(redis.ResponseError, match="has m="):
        other.check_and_add([fp(1)])


def test_false_positive_rate_close_to_configured_and_no_false_negatives(client):
    # 50 000 items: about 500 false positives expected, so the +-30 % band is over six standard deviations wide
    n, rate = 50_000, 0.01
    bloom = BloomFilter(client, PREFIX + "{t}:bloom", capacity=n, error_rate=rate)
    added = [fp(i) for i in range(n)]
    taken_as_seen = 0
    for i in range(0, n, 5000):
        taken_as_seen += bloom.check_and_add(added[i:i + 5000]).count(False)
    # While filling, a new item is wrongly taken as seen at most at the final rate.
    assert taken_as_seen < n * rate
    for i in range(0, n, 5000):
        assert all(bloom.contains(added[i:i + 5000])), "a false negative"
    probes = [fp(i, salt="other/") for i in range(n)]
    false_positives = sum(sum(bloom.contains(probes[i:i + 5000])) for i in range(0, n, 5000))
    measured = false_positives / n
    assert 0.7 * rate < measured < 1.3 * rate, measured
