"""The Lua scripts behind ``crawltasks.redisstate``: each is one atomic state transition.

Kept apart from the Python that calls them so each side stays readable; key names are built in
``redisstate.Keys`` and passed in as KEYS.
"""

# KEYS: seen, stats, per-host counts, leases, inflight, hosts. ARGV: max_pages, max_per_host (0 = no cap),
# lease_ms, then fp, host, ticket, request JSON per request ("!" before fp: dont_filter).
# A new request is marked seen and leased in the same step, so no crash can leave it seen but unsent:
# if its chain is never published, the reclaimer sends it. Returns per request 1 new, 0 duplicate,
# 2 over max_pages, 3 over max_per_host.
SCHEDULE = """
local max_pages, max_host = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local deadline = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[3])
local scheduled = tonumber(redis.call('HGET', KEYS[2], 'scheduled') or '0')
local flags, counts = {}, {0, 0, 0, 0}
for i = 4, #ARGV, 4 do
  local fp, host = ARGV[i], ARGV[i + 1]
  local force = string.sub(fp, 1, 1) == '!'
  if force then fp = string.sub(fp, 2) end
  local flag = 1
  if not force and max_pages == 0 and max_host == 0 then
    if redis.call('SADD', KEYS[1], fp) == 0 then flag = 0 end
  elseif not force and redis.call('SISMEMBER', KEYS[1], fp) == 1 then flag = 0
  elseif max_pages > 0 and scheduled + counts[2] >= max_pages then flag = 2
  elseif max_host > 0 and tonumber(redis.call('HGET', KEYS[3], host) or '0') >= max_host then flag = 3
  else
    redis.call('SADD', KEYS[1], fp)
    if max_host > 0 then redis.call('HINCRBY', KEYS[3], host, 1) end
  end
  if flag == 1 then
    redis.call('SADD', KEYS[6], host)
    redis.call('ZADD', KEYS[4], deadline, ARGV[i + 2])
    if ARGV[i + 3] ~= '' then redis.call('HSET', KEYS[5], ARGV[i + 2], ARGV[i + 3]) end
  end
  flags[#flags + 1] = flag
  counts[flag + 1] = counts[flag + 1] + 1
end
if counts[2] > 0 then
  redis.call('HINCRBY', KEYS[2], 'scheduled', counts[2])
  redis.call('HINCRBY', KEYS[2], 'pending', counts[2])
end
if counts[1] > 0 then redis.call('HINCRBY', KEYS[2], 'duplicates', counts[1]) end
if counts[3] > 0 then
  redis.call('HINCRBY', KEYS[2], 'filtered', counts[3])
  redis.call('HINCRBY', KEYS[2], 'filtered_max_pages', counts[3])
end
if counts[4] > 0 then
  redis.call('HINCRBY', KEYS[2], 'filtered', counts[4])
  redis.call('HINCRBY', KEYS[2], 'filtered_max_pages_per_host', counts[4])
end
return flags
"""

# KEYS: outcome, stats, meta, leases, inflight. ARGV: ticket, outcome, ticket, outcome, ...
# A ticket is counted once, whatever the replays, and its lease ends. Returns {newly finished,
# crawl finished now (0/1)}.
FINISH = """
local done = 0
for i = 1, #ARGV, 2 do
  redis.call('ZREM', KEYS[4], ARGV[i])
  redis.call('HDEL', KEYS[5], ARGV[i])
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('HINCRBY', KEYS[2], ARGV[i + 1], 1)
    done = done + 1
  end
end
local pending
if done > 0 then pending = redis.call('HINCRBY', KEYS[2], 'pending', 0 - done)
else pending = tonumber(redis.call('HGET', KEYS[2], 'pending') or '0') end
if pending <= 0 then
  local t = redis.call('TIME')
  if redis.call('HSETNX', KEYS[3], 'finished_at', t[1] + t[2] / 1e6) == 1 then
    local cancelled = redis.call('HGET', KEYS[3], 'state') == 'cancelling'
    redis.call('HSET', KEYS[3], 'state', cancelled and 'cancelled' or 'finished')
    return {done, 1}
  end
end
return {done, 0}
"""

# KEYS: leases, inflight, outcome. ARGV: lease_ms, then ticket, request JSON ("" keeps the saved one).
# Takes or renews the lease of requests not yet finished.
LEASE = """
local t = redis.call('TIME')
local deadline = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 then
    redis.call('ZADD', KEYS[1], deadline, ARGV[i])
    if ARGV[i + 1] ~= '' then redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
  end
end
return 1
"""

# KEYS: leases, inflight, outcome. ARGV: lease_ms, max. Expired leases of unfinished requests are
# renewed and their requests returned (to be sent again); finished ones are dropped. Atomic, so two
# reclaimers never send the same request twice.
RECLAIM = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, ticket in ipairs(expired) do
  local req = redis.call('HGET', KEYS[2], ticket)
  if redis.call('HEXISTS', KEYS[3], ticket) == 1 or not req then
    redis.call('ZREM', KEYS[1], ticket)
    redis.call('HDEL', KEYS[2], ticket)
  else
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ticket)
    out[#out + 1] = req
  end
end
return out
"""

# KEYS: outcome, stats, meta. ARGV: tickets. Failed tickets become pending again (retry-failed);
# the crawl is running again. Returns 1/0 per ticket.
REDRIVE = """
local flags, n = {}, 0
for i, ticket in ipairs(ARGV) do
  if redis.call('HGET', KEYS[1], ticket) == 'failed' then
    redis.call('HDEL', KEYS[1], ticket)
    flags[i] = 1; n = n + 1
  else flags[i] = 0 end
end
if n > 0 then
  redis.call('HINCRBY', KEYS[2], 'failed', 0 - n)
  redis.call('HINCRBY', KEYS[2], 'pending', n)
  redis.call('HINCRBY', KEYS[2], 'redriven', n)
  redis.call('HDEL', KEYS[3], 'finished_at')
  redis.call('HSET', KEYS[3], 'state', 'running')
end
return flags
"""

# KEYS: meta, parked. ARGV: from-states (comma separated), to-state.
# Moves the crawl's state when it is in one of from-states; returns {changed, parked batches (drained
# unless the new state is paused)}.
CONTROL = """
local state = redis.call('HGET', KEYS[1], 'state') or ''
if not string.find(',' .. ARGV[1] .. ',', ',' .. state .. ',', 1, true) then return {0, {}} end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
if ARGV[2] == 'paused' then return {1, {}} end
local parked = redis.call('LRANGE', KEYS[2], 0, -1)
redis.call('DEL', KEYS[2])
return {1, parked}
"""

# KEYS: meta, parked. ARGV: batch JSON. Parks the batch only while the crawl is paused (1), else 0.
PARK = """
if redis.call('HGET', KEYS[1], 'state') ~= 'paused' then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1
"""

# KEYS: host slots, host next, host backoff. ARGV: limit, delay_ms, lease_ms, tokens...
# Grants free slots to as many tokens as it can (one at most when the host has a delay).
# Returns {slots granted, milliseconds to wait before asking again when none was, the host's
# back-off in ms (so that a worker reports good answers only to a host that is backed off)}.
ACQUIRE_HOST = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local extra = tonumber(redis.call('GET', KEYS[3]) or '0')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local nxt = tonumber(redis.call('GET', KEYS[2]) or '0')
if nxt > now then return {0, nxt - now, extra} end
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
if free <= 0 then return {0, 25, extra} end
local delay = tonumber(ARGV[2]) + extra
local n = math.min(free, #ARGV - 3)
if delay > 0 then n = 1 end
local lease = tonumber(ARGV[3])
for i = 1, n do redis.call('ZADD', KEYS[1], now + lease, ARGV[3 + i]) end
redis.call('PEXPIRE', KEYS[1], lease)
if delay > 0 then redis.call('SET', KEYS[2], now + delay, 'PX', delay) end
return {n, 0, extra}
"""

# KEYS: host next, host backoff. ARGV: "slow" with a wait in ms (Retry-After or 0), or "ok".
# A slow answer (429/503) doubles the host's extra delay (1 s to 5 min) and holds the host for
# max(wait, extra delay); good answers halve it, and it expires after ten times its length.
HOST_FEEDBACK = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local extra = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[1] == 'slow' then
  extra = math.min(math.max(extra * 2, 1000), 300000)
  redis.call('SET', KEYS[2], extra, 'PX', math.max(extra * 10, 10000))
  local hold = math.max(tonumber(ARGV[2]), extra)
  local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
  if now + hold > nxt then redis.call('SET', KEYS[1], now + hold, 'PX', hold) end
  return extra
end
if extra > 0 then
  extra = math.floor(extra / 2)
  if extra < 100 then redis.call('DEL', KEYS[2])
  else redis.call('SET', KEYS[2], extra, 'PX', math.max(extra * 10, 10000)) end
end
return extra
"""
