"""The Lua scripts behind ``crawltasks.backends.redis.frontier``: each is one atomic step of the per-host frontier.

Key names come from ``crawltasks.backends.redis.keys``. A host's three queues (high, default, low) are named by the
script from the prefix it is given plus ``<host>:<h|d|l>``: they share the crawl's hash tag, so every
key a script touches is in the crawl's slot. A claim is a JSON array
``[owner, fetching (1/0), since_ms, host, priority code, queue entry, hot (1/0, absent: 0)]``.
"""

from .bloom import BLOOM_LUA

# The clock, a host's three queue names, and putting a host in the heap at the right time.
_COMMON = """
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
local PRIOS = {'h', 'd', 'l'}
local function queued_of(prefix, host)
  local n = 0
  for _, p in ipairs(PRIOS) do n = n + redis.call('LLEN', prefix .. host .. ':' .. p) end
  return n
end
-- the host may be fetched again at max(its next time, now), unless it waits for a free slot
local function wake(ready, hostnext, host, now)
  local at = math.max(tonumber(redis.call('HGET', hostnext, host) or '0'), now)
  redis.call('ZADD', ready, at, host)
end
local function slot_free(busy, frontier, host)
  if redis.call('HINCRBY', busy, host, -1) <= 0 then redis.call('HDEL', busy, host) end
  redis.call('HINCRBY', frontier, 'outstanding', -1)
end
"""

# KEYS: seen, stats, per-host counts, hosts, frontier, ready[, Bloom parameters]. ARGV: queue prefix,
# max_pages, max_per_host (0 = no cap), counted (1: queue only; the requests are pending already),
# Bloom bits m and hashes k (0 0: the seen key is an exact set; else it is a Bloom bitmap, see
# ``bloom.py`` beside this module), then fp ("!" before it: dont_filter), host, priority code, queue entry per request.
# A new request is marked seen and queued in the same step, in either dedupe mode: nothing can be
# seen and not queued, and the max_pages caps hold for both.
# Returns per request 1 new, 0 duplicate, 2 over max_pages, 3 over max_per_host.
SCHEDULE = _COMMON + BLOOM_LUA + """
local prefix, max_pages, max_host = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local counted = ARGV[4] == '1'
local m, k = tonumber(ARGV[5]), tonumber(ARGV[6])
if m > 0 then
  local refused = bloom_ready(KEYS[1], KEYS[7], m, k)
  if refused then return refused end
end
-- the seen-set: 1 when fp was not in it and now is (a Bloom filter: one of its bits was clear)
local function add_seen(fp)
  if m == 0 then return redis.call('SADD', KEYS[1], fp) end
  return bloom_add(KEYS[1], m, k, fp)
end
local function is_seen(fp)
  if m == 0 then return redis.call('SISMEMBER', KEYS[1], fp) == 1 end
  return bloom_has(KEYS[1], m, k, fp)
end
local now = now_ms()
local scheduled = tonumber(redis.call('HGET', KEYS[2], 'scheduled') or '0')
local flags, counts = {}, {0, 0, 0, 0}
for i = 7, #ARGV, 4 do
  local fp, host = ARGV[i], ARGV[i + 1]
  local force = string.sub(fp, 1, 1) == '!'
  if force then fp = string.sub(fp, 2) end
  local flag = 1
  if counted then flag = 1
  elseif not force and max_pages == 0 and max_host == 0 then
    if add_seen(fp) == 0 then flag = 0 end
  elseif not force and is_seen(fp) then flag = 0
  elseif max_pages > 0 and scheduled + counts[2] >= max_pages then flag = 2
  elseif max_host > 0 and tonumber(redis.call('HGET', KEYS[3], host) or '0') >= max_host then flag = 3
  else
    add_seen(fp)
    if max_host > 0 then redis.call('HINCRBY', KEYS[3], host, 1) end
  end
  if flag == 1 then
    redis.call('SADD', KEYS[4], host)
    redis.call('RPUSH', prefix .. host .. ':' .. ARGV[i + 2], ARGV[i + 3])
    redis.call('ZADD', KEYS[6], 'NX', now, host)
    if ARGV[i + 2] == 'h' then redis.call('HINCRBY', KEYS[5], 'queued_h', 1) end
  end
  flags[#flags + 1] = flag
  counts[flag + 1] = counts[flag + 1] + 1
end
if counts[2] > 0 then
  redis.call('HINCRBY', KEYS[5], 'queued', counts[2])
  if not counted then
    redis.call('HINCRBY', KEYS[2], 'scheduled', counts[2])
    redis.call('HINCRBY', KEYS[2], 'pending', counts[2])
  end
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

# KEYS: ready, frontier, claims, busy, hostnext, hostlimits. ARGV: queue prefix, limit, concurrency,
# delay_ms, random_delay_ms, lease prefix, hosts to look at, priorities to take ("hdl", or "h"),
# lead_ms (a host is handed out this much before its delay is over, at most half of it: the fetch
# engine holds the request until the shared gate opens, so it starts when the delay ends, not a
# dispatch later).
# Takes requests of hosts whose time has come: per host at most its free slots, and one when it has
# a delay; high before default before low. Each taken request gets a claim; the host moves on by its
# delay, or parks until a slot is free. Returns {{lease, priority code, entry}..., ms to the next ready host}.
TAKE = _COMMON + """
local prefix, left = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local hosts = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[7]))
local out, seq, taken = {}, tonumber(redis.call('HINCRBY', KEYS[2], 'seq', 1)), 0
for _, host in ipairs(hosts) do
  if left <= 0 then break end
  local conc, delay, rnd = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local own = redis.call('HGET', KEYS[6], host)
  if own then
    local c, d, r = string.match(own, '^(%d+),(%d+),(%d+)$')
    conc, delay, rnd = tonumber(c), tonumber(d), tonumber(r)
  end
  local busy = tonumber(redis.call('HGET', KEYS[4], host) or '0')
  local n = math.min(conc - busy, left)
  if delay + rnd > 0 then n = math.min(n, 1) end
  local got = 0
  for _, p in ipairs(PRIOS) do
    while got < n and string.find(ARGV[8], p, 1, true) do
      local entry = redis.call('LPOP', prefix .. host .. ':' .. p)
      if not entry then break end
      got = got + 1
      local lease = ARGV[6] .. seq .. '.' .. (taken + got)
      if p == 'h' then redis.call('HINCRBY', KEYS[2], 'queued_h', -1) end
      redis.call('HSET', KEYS[3], lease, cjson.encode({'', 1, now, host, p, entry}))
      out[#out + 1] = {lease, p, entry}
    end
  end
  if got > 0 then
    taken, left, busy = taken + got, left - got, busy + got
    redis.call('HSET', KEYS[4], host, busy)
    local wait = delay - math.min(tonumber(ARGV[9]), math.floor(delay / 2))
    if rnd > 0 then wait = wait + math.random(0, rnd) end
    redis.call('HSET', KEYS[5], host, now + wait)
  end
  if queued_of(prefix, host) == 0 then
    redis.call('ZREM', KEYS[1], host)
  elseif busy >= conc then
    redis.call('ZADD', KEYS[1], now + """ + "3600000" + """, host)
  else
    wake(KEYS[1], KEYS[5], host, now)
  end
end
if taken > 0 then
  redis.call('HINCRBY', KEYS[2], 'outstanding', taken)
  redis.call('HINCRBY', KEYS[2], 'queued', -taken)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_ms = -1
if first[2] then next_ms = math.max(0, tonumber(first[2]) - now) end
return {out, next_ms}
"""

# KEYS: claims. ARGV: owner, leases... The owner takes up the claims that are still current (1/0 each).
CLAIM = _COMMON + """
local now, out = now_ms(), {}
for i = 2, #ARGV do
  local raw = redis.call('HGET', KEYS[1], ARGV[i])
  if raw then
    local c = cjson.decode(raw)
    c[1], c[3] = ARGV[1], now
    redis.call('HSET', KEYS[1], ARGV[i], cjson.encode(c))
    out[#out + 1] = 1
  else out[#out + 1] = 0 end
end
return out
"""

# KEYS: claims. ARGV: owner, leases... A parse or store task takes up its requests' claims (the
# claim's 7th field is 1 while its request is worked on: "hot"). Per lease: 0 when the claim is gone
# (this delivery is stale), else 1 + the deliveries of the request lost with their worker. A claim
# another owner held hot was being worked on when that delivery died (a pool child, its message
# delivered again): a loss, counted here in the entry. Claims never lost become hot; the others cold.
TAKE_UP = _COMMON + """
local now, out = now_ms(), {}
for i = 2, #ARGV do
  local raw = redis.call('HGET', KEYS[1], ARGV[i])
  if raw then
    local c = cjson.decode(raw)
    local e = cjson.decode(c[6])
    local extras = e[4]
    if type(extras) ~= 'table' then extras = {} end
    local lost = tonumber(extras['l'] or 0)
    if c[7] == 1 and c[1] ~= ARGV[1] then
      lost = lost + 1
      extras['l'] = lost
      e[4] = extras
      c[6] = cjson.encode(e)
    end
    c[1], c[3] = ARGV[1], now
    if lost == 0 then c[7] = 1 else c[7] = 0 end
    redis.call('HSET', KEYS[1], ARGV[i], cjson.encode(c))
    out[#out + 1] = lost + 1
  else out[#out + 1] = 0 end
end
return out
"""

# KEYS: claims. ARGV: owner, hot (1/0), leases... The owner starts (1) or stops (0) working on these
# requests; claims it no longer holds are left alone.
MARK = _COMMON + """
local now = now_ms()
for i = 3, #ARGV do
  local raw = redis.call('HGET', KEYS[1], ARGV[i])
  if raw then
    local c = cjson.decode(raw)
    if c[1] == ARGV[1] then
      c[7] = tonumber(ARGV[2])
      if c[7] == 0 then c[3] = now end  -- cold again: handed on to the next stage now
      redis.call('HSET', KEYS[1], ARGV[i], cjson.encode(c))
    end
  end
end
return 1
"""

# KEYS: claims, busy, frontier, ready, hostnext. ARGV: leases... Their fetches are over: each host
# slot is freed once, and a host that waited for a slot may be taken again.
FETCHED = _COMMON + """
local now = now_ms()
for i = 1, #ARGV do
  local raw = redis.call('HGET', KEYS[1], ARGV[i])
  if raw then
    local c = cjson.decode(raw)
    if c[2] == 1 then
      c[2], c[3] = 0, now
      redis.call('HSET', KEYS[1], ARGV[i], cjson.encode(c))
      slot_free(KEYS[2], KEYS[3], c[4])
      if redis.call('ZSCORE', KEYS[4], c[4]) then wake(KEYS[4], KEYS[5], c[4], now) end
    end
  end
end
return 1
"""

# KEYS: claims, busy, frontier, ready, hostnext. ARGV: queue prefix, hold_ms, lost (1: count a lost
# delivery in the entry), then lease, entry ("": the claimed one) pairs. Claimed requests go back to
# the front of their host's queue, the host held for hold_ms. Returns how many went back.
GIVE_BACK = _COMMON + """
local prefix, hold, lost = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local now, n = now_ms(), 0
for i = 4, #ARGV, 2 do
  local raw = redis.call('HGET', KEYS[1], ARGV[i])
  if raw then
    local c = cjson.decode(raw)
    local host, entry = c[4], ARGV[i + 1]
    if entry == '' then entry = c[6] end
    if lost then
      local e = cjson.decode(entry)
      if e[4] == nil then e[4] = {} end
      e[4]['l'] = (e[4]['l'] or 0) + 1
      entry = cjson.encode(e)
    end
    if c[2] == 1 then slot_free(KEYS[2], KEYS[3], host) end
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('LPUSH', prefix .. host .. ':' .. c[5], entry)
    if c[5] == 'h' then redis.call('HINCRBY', KEYS[3], 'queued_h', 1) end
    local nxt = math.max(tonumber(redis.call('HGET', KEYS[5], host) or '0'), now + hold)
    redis.call('HSET', KEYS[5], host, nxt)
    wake(KEYS[4], KEYS[5], host, now)
    n = n + 1
  end
end
if n > 0 then redis.call('HINCRBY', KEYS[3], 'queued', n) end
return n
"""

# KEYS: ready, hostnext. ARGV: host, hold_ms. The host is not fetched before now + hold_ms.
HOLD = _COMMON + """
local now = now_ms()
local until_ms = now + tonumber(ARGV[2])
if until_ms > tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') then
  redis.call('HSET', KEYS[2], ARGV[1], until_ms)
end
redis.call('ZADD', KEYS[1], 'XX', 'GT', until_ms, ARGV[1])
return 1
"""

# KEYS: claims. ARGV: dispatch_lease_ms, lease_ms, renew_ms (0: off), handoff_ms (0: off), live
# owners... A claim between two stages (neither fetching nor hot) that the next stage has not taken
# up within handoff_ms is lost too (kind 0): its message died with a worker that had just taken it
# off the queue. Which claims
# are lost: owned by a worker that is not live, when it was fetching or working on them (hot: kind 1,
# a loss is counted); owned by a dead worker but only waiting there (cold), unowned past the dispatch
# lease, in a live worker's hands (fetching) but not renewed within renew_ms, or older than the lease
# (kind 0).
# Returns {lease, kind}... (the caller gives them back).
EXPIRED = _COMMON + """
local now = now_ms()
local dispatch, lease, renew = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local handoff = tonumber(ARGV[4])
local live = {}
for i = 5, #ARGV do live[ARGV[i]] = true end
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local c = cjson.decode(all[i + 1])
  local owner, since = c[1], c[3]
  if owner ~= '' and not live[owner] then
    if c[2] == 1 or c[7] == 1 then out[#out + 1] = {all[i], 1} else out[#out + 1] = {all[i], 0} end
  elseif (owner == '' and since + dispatch < now) or since + lease < now
      or (owner ~= '' and c[2] == 1 and renew > 0 and since + renew < now)
      or (owner ~= '' and c[2] == 0 and c[7] ~= 1 and handoff > 0 and since + handoff < now) then
    out[#out + 1] = {all[i], 0}
  end
end
return out
"""

# KEYS: ready, frontier, stats. ARGV: queue prefix, hosts per call. Drops the queued requests of up
# to that many hosts, counted as skipped. Returns {dropped, hosts left}.
DROP_QUEUED = _COMMON + """
local prefix = ARGV[1]
local hosts = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local n = 0
for _, host in ipairs(hosts) do
  for _, p in ipairs(PRIOS) do
    local key = prefix .. host .. ':' .. p
    n = n + redis.call('LLEN', key)
    redis.call('DEL', key)
  end
  redis.call('ZREM', KEYS[1], host)
end
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('HDEL', KEYS[2], 'queued_h') end
if n > 0 then
  redis.call('HINCRBY', KEYS[2], 'queued', -n)
  redis.call('HINCRBY', KEYS[3], 'skipped', n)
  redis.call('HINCRBY', KEYS[3], 'pending', -n)
end
return {n, redis.call('ZCARD', KEYS[1])}
"""
