"""The Lua scripts behind ``crawltasks.backends.redis.registry`` and the shared per-host gate
(``backends.redis.gate``): each is one atomic state transition.

Kept apart from the Python that calls them so each side stays readable; key names are built in
``crawltasks.backends.redis.keys`` and passed in as KEYS, but for GATE_EXCHANGE, which is given the
parts of the host keys' names from there and joins them itself.
"""

# KEYS: outcome, stats, meta, claims, series, host done. ARGV: the series' width, ring and life sizes
# (crawltasks.monitor.series), then ticket, outcome, lease, ticket, outcome, lease, ...
# A ticket is counted once, whatever the replays, and its claim in the frontier ends. What is newly
# counted also goes into the crawl's time series and, by the host its claim names, into the per-host
# stored/failed counts (fields "s:<host>", "f:<host>"). Returns {newly finished, crawl finished now (0/1)}.
FINISH = """
local function counts(v)
  local s, f, k = string.match(v or '', '(%d+) (%d+) (%d+)$')
  return tonumber(s or '0'), tonumber(f or '0'), tonumber(k or '0')
end
local function record(key, width, ring, life, n)
  local now = tonumber(redis.call('TIME')[1])
  local b = math.floor(now / width)
  local slot = 'r' .. (b % ring)
  local cur = redis.call('HGET', key, slot)
  local s, f, k = 0, 0, 0
  if cur and tonumber(string.match(cur, '^(%d+) ')) == b then s, f, k = counts(cur) end
  redis.call('HSET', key, slot, b .. ' ' .. (s + n.stored) .. ' ' .. (f + n.failed) .. ' ' .. (k + n.skipped))
  local head = redis.call('HMGET', key, 't0', 'w')
  local t0, w = tonumber(head[1]), tonumber(head[2])
  if not t0 then
    t0, w = b * width, width
    redis.call('HSET', key, 't0', t0, 'w', w)
  end
  local i = math.floor((now - t0) / w)
  while i >= life do  -- outgrown: neighbours merge in pairs, the width doubles
    local names, merged = {}, {}
    for j = 0, life - 1 do names[j + 1] = 'l' .. j end
    local vals = redis.call('HMGET', key, unpack(names))
    redis.call('HDEL', key, unpack(names))
    for j = 0, life - 1 do
      if vals[j + 1] then
        local h = math.floor(j / 2)
        local m = merged[h] or {0, 0, 0}
        local a, c, d = counts(vals[j + 1])
        merged[h] = {m[1] + a, m[2] + c, m[3] + d}
      end
    end
    for h, m in pairs(merged) do redis.call('HSET', key, 'l' .. h, m[1] .. ' ' .. m[2] .. ' ' .. m[3]) end
    w = w * 2
    redis.call('HSET', key, 'w', w)
    i = math.floor((now - t0) / w)
  end
  s, f, k = counts(redis.call('HGET', key, 'l' .. i))
  redis.call('HSET', key, 'l' .. i, (s + n.stored) .. ' ' .. (f + n.failed) .. ' ' .. (k + n.skipped))
end
local done, n = 0, {stored = 0, failed = 0, skipped = 0}
for i = 4, #ARGV, 3 do
  local host = nil
  if ARGV[i + 2] ~= '' then
    local claim = redis.call('HGET', KEYS[4], ARGV[i + 2])
    if claim then  -- its host: the 4th field of the claim's JSON array (frontier_lua), read without decoding it
      host = string.match(claim, '^%[[^,]*,[^,]*,[^,]*,"([^"]*)"')
      if not host then
        local ok, c = pcall(cjson.decode, claim)
        if ok and type(c) == 'table' and type(c[4]) == 'string' then host = c[4] end
      end
      redis.call('HDEL', KEYS[4], ARGV[i + 2])
    end
  end
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('HINCRBY', KEYS[2], ARGV[i + 1], 1)
    done = done + 1
    n[ARGV[i + 1]] = n[ARGV[i + 1]] + 1
    if host and ARGV[i + 1] ~= 'skipped' then
      redis.call('HINCRBY', KEYS[6], string.sub(ARGV[i + 1], 1, 1) .. ':' .. host, 1)
    end
  end
end
if done > 0 then record(KEYS[5], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), n) end
local pending
if done > 0 then pending = redis.call('HINCRBY', KEYS[2], 'pending', 0 - done)
else pending = tonumber(redis.call('HGET', KEYS[2], 'pending') or '0') end
-- the crawl's registry is gone (a Redis that lost its data) or its counters contradict each other:
-- never call that finished; the crawl's state says it was lost
if redis.call('HEXISTS', KEYS[3], 'started_at') == 0 or pending < 0 then
  redis.call('HSET', KEYS[3], 'state', 'lost')
  return {done, 0}
end
-- a crawl whose seeds keep coming (meta "open": crawltasks.frontier.seeds) finishes only once closed or cancelled
if pending <= 0 and (redis.call('HEXISTS', KEYS[3], 'open') == 0
                     or redis.call('HGET', KEYS[3], 'state') == 'cancelling') then
  local t = redis.call('TIME')
  if redis.call('HSETNX', KEYS[3], 'finished_at', t[1] + t[2] / 1e6) == 1 then
    local cancelled = redis.call('HGET', KEYS[3], 'state') == 'cancelling'
    redis.call('HSET', KEYS[3], 'state', cancelled and 'cancelled' or 'finished')
    return {done, 1}
  end
end
return {done, 0}
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

# KEYS: meta, stats, then the crawl's working keys. ARGV: retention_ms, summary_ms. A finished crawl's
# keys start to expire: its working state after the retention, meta and stats (what `list` and `stats`
# show) after summary_ms. Only while it is finished, so a crawl reopened meanwhile keeps its keys.
# Returns 1 if it did.
RETIRE = """
if redis.call('HEXISTS', KEYS[1], 'finished_at') == 0 then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
for i = 3, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
return 1
"""

# KEYS: meta, then every other key of the crawl. A finished crawl runs again (more seeds, continued by
# id): it is no longer finished and its keys lose their expiry, in one step with RETIRE's check, so its
# state cannot vanish mid-run.
REOPEN = """
redis.call('HDEL', KEYS[1], 'finished_at')
redis.call('HSET', KEYS[1], 'state', 'running')
for i = 1, #KEYS do redis.call('PERSIST', KEYS[i]) end
return 1
"""

# KEYS: meta. ARGV: from-states (comma separated), to-state. Moves the crawl's state when it is in
# one of from-states; returns 1 if it did.
CONTROL = """
local state = redis.call('HGET', KEYS[1], 'state') or ''
if not string.find(',' .. ARGV[1] .. ',', ',' .. state .. ',', 1, true) then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
return 1
"""

# The shared per-host gate's exchange (RedisGate.exchange), in one call with one reading of the
# clock: late starts, then slots given back, then each ask in turn.
# KEYS: workers (heartbeats). ARGV: the parts of a host key's name (Keys.host_head, then the tails of
# the host's slots, next and back-off keys), dead_ms, the token prefix, then three lists, one string
# each, an item a line: the late starts "<delay_ms> <host>", the releases "<token> <host>", the asks
# "<want> <limit> <delay_ms> <lease_ms> <host>". The host comes last, whatever it holds (a space, or
# nothing: host_key's answer to a URL it cannot read), but a line break (urlsplit drops them); a token
# holds no space. Three strings cost the client far less to send than an argument per item.
# The host keys are named here (head .. host .. tail), not passed in KEYS: a design for one Redis
# instance, not Redis Cluster.
# A late start: the host's next start is now + delay_ms at least (as HOST_STARTED). A release: the
# token leaves the host's slots. An ask: free slots go to up to want tokens (one at most when the
# host has a delay, its own plus the back-off); a token "<worker id>|..." whose worker has not beaten
# for dead_ms is freed when the host is full, so a worker that died mid-request holds its host no
# longer than its heartbeat says. Granted tokens are the prefix and 1, 2, 3, ... counted across the
# asks in order. Returns one string, three numbers per ask: the slots granted; if none, the ms to
# wait before asking again, else the host's next start they set in ms of the gate's clock (0 when
# the host has no delay; what LATE_START is told); the host's back-off in ms (a worker reports good
# answers only to a host that is backed off).
GATE_EXCHANGE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local head, slots_tail, next_tail, backoff_tail = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local dead_ms, prefix, granted = tonumber(ARGV[5]), ARGV[6], 0
for delay, host in string.gmatch(ARGV[7], '(%-?%d+) ([^\\n]*)') do
  local key = head .. host .. next_tail
  delay = tonumber(delay)
  if delay > 0 and now + delay > tonumber(redis.call('GET', key) or '0') then
    redis.call('SET', key, now + delay, 'PX', delay)
  end
end
for token, host in string.gmatch(ARGV[8], '(%S+) ([^\\n]*)') do
  redis.call('ZREM', head .. host .. slots_tail, token)
end
local function free_dead(slots)
  for _, token in ipairs(redis.call('ZRANGE', slots, 0, -1)) do
    local owner = string.match(token, '^(.*)|')
    if owner then
      local beat = tonumber(redis.call('ZSCORE', KEYS[1], owner) or '0')
      if beat < now - dead_ms then redis.call('ZREM', slots, token) end
    end
  end
end
local function acquire(want, limit, delay, lease, host)
  local slots, next_key = head .. host .. slots_tail, head .. host .. next_tail
  local extra = tonumber(redis.call('GET', head .. host .. backoff_tail) or '0')
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  local nxt = tonumber(redis.call('GET', next_key) or '0')
  if nxt > now then return 0, nxt - now, extra end
  local free = limit - redis.call('ZCARD', slots)
  if free <= 0 then
    free_dead(slots)
    free = limit - redis.call('ZCARD', slots)
  end
  if free <= 0 then return 0, 25, extra end
  delay = delay + extra
  local n = math.min(free, math.max(1, want))
  if delay > 0 then n = 1 end
  for _ = 1, n do
    granted = granted + 1
    redis.call('ZADD', slots, now + lease, prefix .. granted)
  end
  redis.call('PEXPIRE', slots, lease)
  if delay > 0 then
    redis.call('SET', next_key, now + delay, 'PX', delay)
    return n, now + delay, extra
  end
  return n, 0, extra
end
local out = {}
local ask = '(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) ([^\\n]*)'
for want, limit, delay, lease, host in string.gmatch(ARGV[9], ask) do
  out[#out + 1] = string.format('%d %d %d', acquire(tonumber(want), tonumber(limit), tonumber(delay),
                                                    tonumber(lease), host))
end
return table.concat(out, ' ')
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

# KEYS: host next. ARGV: delay_ms. A request of the host really started now (later than its slot was
# granted): the next one may not start before now + delay, whatever the grant said.
HOST_STARTED = """
local t = redis.call('TIME')
local until_ms = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
if until_ms > tonumber(redis.call('GET', KEYS[1]) or '0') then
  redis.call('SET', KEYS[1], until_ms, 'PX', tonumber(ARGV[1]))
end
return 1
"""

# KEYS: host next. ARGV: delay_ms, mine_ms (the next start the request's grant set, or the one this
# script last set for it). A request that reaches the wire late: when no start was granted after its
# own (the host's next start is still the one it set, or passed), it starts now and the next one
# waits a delay from now; else it starts when that later start's delay ends, and the next one a delay
# after it. Returns {ms to wait before starting, the host's next start it set (its mine_ms next time)}.
LATE_START = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local delay = tonumber(ARGV[1])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
local at = now
if nxt > now and nxt > tonumber(ARGV[2]) then at = nxt end
redis.call('SET', KEYS[1], at + delay, 'PX', at + delay - now)
return {at - now, at + delay}
"""
