"""A Bloom filter over a Redis bitmap, for dedupe of very large crawls.

Redis 7 has no Bloom commands (they are a module), so the filter is a plain string key used as a
bitmap and every operation is one Lua script, atomic across workers. An exact seen-set costs about
88 bytes per 40-character hex fingerprint; the bitmap costs ``-ln(p) / ln(2)**2`` bits per expected
item: 1.2 bytes at a 1 % false-positive rate, 1.8 bytes at 0.1 %. The price is that a small share of
new URLs (about the configured rate, once the filter is full) are taken as seen and never crawled;
there are never false negatives, so nothing is fetched twice.

Bit positions come from the fingerprint itself by double hashing (Kirsch-Mitzenmacher):
``g_i = (h1 + i * h2) mod m`` with h1 and h2 two 40-bit slices of the SHA-1, so no hash runs in Lua
and a position stays exact in Lua's doubles (below 2**53). The size ``m`` and the number of hashes
``k`` follow from the expected items ``n`` and the rate ``p``; they are stored beside the bitmap, and
a worker configured differently gets an error rather than a silently broken filter.

``check_and_add`` has the contract of :meth:`crawltasks.backends.redis.registry.RedisState.schedule`'s seen-set
part: fingerprints in, one flag per fingerprint out (True = new), a leading ``"!"`` forces True
(``dont_filter``) while still adding, and an optional stats hash gets the same counters.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import redis

MAX_BITS = 2**32  # a Redis string holds at most 512 MB
_HEX40 = re.compile(r"[0-9a-f]{40}")

# Lua functions for every script that touches a filter (this module's, and the frontier's SCHEDULE).
# bloom_ready: the bitmap is allocated, and its m and k recorded, on first use; a filter made with
# other m and k is an error reply (returned: the caller returns it), never a silently broken filter.
# bloom_add: sets fp's k bits, 1 when one was clear (new). bloom_has: true when all k are set.
BLOOM_LUA = """
local function bloom_ready(bitmap, params, m, k)
  if redis.call('HSETNX', params, 'm', m) == 1 then
    redis.call('HSET', params, 'k', k)
    redis.call('SETBIT', bitmap, m - 1, 0)
    return nil
  end
  local p = redis.call('HMGET', params, 'm', 'k')
  if tonumber(p[1]) ~= m or tonumber(p[2]) ~= k then
    return redis.error_reply('bloom filter ' .. bitmap .. ' has m=' .. p[1] .. ' k=' .. p[2] ..
      ', asked for m=' .. m .. ' k=' .. k)
  end
  return nil
end
local function bloom_add(bitmap, m, k, fp)
  local h1, h2, fresh = tonumber(string.sub(fp, 1, 10), 16), tonumber(string.sub(fp, 11, 20), 16), 0
  for j = 0, k - 1 do
    if redis.call('SETBIT', bitmap, (h1 + j * h2) % m, 1) == 0 then fresh = 1 end
  end
  return fresh
end
local function bloom_has(bitmap, m, k, fp)
  local h1, h2 = tonumber(string.sub(fp, 1, 10), 16), tonumber(string.sub(fp, 11, 20), 16)
  for j = 0, k - 1 do
    if redis.call('GETBIT', bitmap, (h1 + j * h2) % m) == 0 then return false end
  end
  return true
end
"""

# KEYS: bitmap, params hash[, stats hash]. ARGV: m, k, fingerprints ("!" prefix: dont_filter).
# Returns one 1/0 per fingerprint: 1 when at least one of its k bits was clear (new), 0 when all were set.
_CHECK_AND_ADD = BLOOM_LUA + """
local m, k = tonumber(ARGV[1]), tonumber(ARGV[2])
local refused = bloom_ready(KEYS[1], KEYS[2], m, k)
if refused then return refused end
local flags, new = {}, 0
for i = 3, #ARGV do
  local fp, force = ARGV[i], false
  if string.sub(fp, 1, 1) == '!' then fp = string.sub(fp, 2); force = true end
  local fresh = bloom_add(KEYS[1], m, k, fp)
  if force then fresh = 1 end
  flags[i - 2] = fresh
  new = new + fresh
end
if KEYS[3] then
  local n = #ARGV - 2
  if new > 0 then
    redis.call('HINCRBY', KEYS[3], 'scheduled', new)
    redis.call('HINCRBY', KEYS[3], 'pending', new)
  end
  if n > new then redis.call('HINCRBY', KEYS[3], 'duplicates', n - new) end
end
return flags
"""

# KEYS: bitmap. ARGV: m, k, fingerprints. Returns 1 when all k bits are set (probably seen), else 0.
_CONTAINS = BLOOM_LUA + """
local m, k = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  out[i - 2] = bloom_has(KEYS[1], m, k, ARGV[i]) and 1 or 0
end
return out
"""


@dataclass(frozen=True)
class BloomParams:
    """Bitmap size in bits (m) and number of hashes (k) for n items at false-positive rate p."""

    capacity: int
    error_rate: float
    bits: int
    hashes: int

    @classmethod
    def for_capacity(cls, capacity: int, error_rate: float = 0.01) -> BloomParams:
        """The optimal m = -n ln p / ln(2)^2 and k = (m / n) ln 2, rounded."""
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if not 0.0 < error_rate < 1.0:
            raise ValueError("error_rate must be between 0 and 1")
        bits = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
        if bits > MAX_BITS:
            raise ValueError(f"{capacity} items at {error_rate} need {bits} bits, more than one Redis "
                             f"string holds ({MAX_BITS}); raise error_rate or shard the filter")
        hashes = max(1, round(bits / capacity * math.log(2)))
        return cls(capacity, error_rate, bits, hashes)

    @property
    def bytes(self) -> int:
        return (self.bits + 7) // 8

    @property
    def bits_per_item(self) -> float:
        return self.bits / self.capacity

    def expected_error(self, items: int | None = None) -> float:
        """False-positive rate after ``items`` insertions (default: at capacity)."""
        n = self.capacity if items is None else items
        return (1 - math.exp(-self.hashes * n / self.bits)) ** self.hashes


def normalize(fp: str) -> str:
    """A 40-hex-digit fingerprint as the script expects; anything else is hashed with SHA-1 first."""
    return fp if _HEX40.fullmatch(fp) else hashlib.sha1(fp.encode()).hexdigest()


class BloomFilter:
    """One Bloom filter in Redis at ``key`` (its parameters at ``key + ':params'``)."""

    def __init__(self, client: redis.Redis, key: str, capacity: int = 10_000_000, error_rate: float = 0.01) -> None:
        self.r = client
        self.key = key
        self.params_key = f"{key}:params"
        self.params = BloomParams.for_capacity(capacity, error_rate)
        self._check_and_add = client.register_script(_CHECK_AND_ADD)
        self._contains = client.register_script(_CONTAINS)

    def check_and_add(self, fingerprints: Sequence[str], dont_filter: Sequence[bool] | None = None,
                      stats_key: str | None = None) -> list[bool]:
        """Atomically add fingerprints; True for each that was new (or dont_filter).

        A repeat inside one call is new only the first time. With ``stats_key``, the counters
        scheduled, pending and duplicates are incremented as ``RedisState.schedule`` does.
        """
        if not fingerprints:
            return []
        force = dont_filter or [False] * len(fingerprints)
        args: list[str | int] = [self.params.bits, self.params.hashes]
        args += [("!" if f else "") + normalize(fp) for fp, f in zip(fingerprints, force, strict=True)]
        keys = [self.key, self.params_key] + ([stats_key] if stats_key else [])
        return [bool(x) for x in self._check_and_add(keys=keys, args=args)]

    def contains(self, fingerprints: Sequence[str]) -> list[bool]:
        """True for each fingerprint that is probably in the filter (never False for an added one)."""
        if not fingerprints:
            return []
        args: list[str | int] = [self.params.bits, self.params.hashes, *(normalize(fp) for fp in fingerprints)]
        return [bool(x) for x in self._contains(keys=[self.key], args=args)]

    def add(self, fingerprint: str) -> bool:
        """Add one fingerprint; True if it was new (e.g. a redirect target claimed as seen)."""
        return self.check_and_add([fingerprint])[0]

    def __contains__(self, fingerprint: str) -> bool:
        return self.contains([fingerprint])[0]

    def memory_usage(self) -> int:
        """Bytes Redis reports for the bitmap key (0 before the first add)."""
        return int(self.r.memory_usage(self.key, samples=0) or 0)

    def clear(self) -> None:
        self.r.delete(self.key, self.params_key)
