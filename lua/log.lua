-- Sliding window log, exact (core/algo/log.go). Params: Period (µs), Rate,
-- WarnAbove, ClearBelow.
-- The key is a sorted set: one member "<at>:<n>" per admission instant, scored
-- by the instant, and the member "lv" scored -1-level. The key expires when
-- its newest entry leaves the window. Cost: O(entries in the window), at most
-- Rate (capped by core.MaxLogRate).

-- logLoad returns the decision instant (the newest entry's if the clock
-- stepped back), the live entries (instants and counts), their total and the
-- level.
local function logLoad(key, P)
  local lv = 0
  local ls = redis.call('ZSCORE', key, 'lv')
  if ls then
    lv = -1 - tonumber(ls)
  end
  local at = now
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #last == 2 and last[1] ~= 'lv' and tonumber(last[2]) > at then
    at = tonumber(last[2])
  end
  local raw = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(at - P), '+inf', 'WITHSCORES')
  local ats, ns, total = {}, {}, 0
  for i = 1, #raw, 2 do
    local m = raw[i]
    local n = tonumber(string.sub(m, string.find(m, ':', 1, true) + 1))
    ats[#ats + 1], ns[#ns + 1] = tonumber(raw[i + 1]), n
    total = total + n
  end
  if #ats == 0 then
    lv = 0
  end
  return at, ats, ns, total, lv
end

-- logSave prunes what left the window and writes the entries' changes: the
-- entry at instant at now counts n (0: removed), old is its previous count.
local function logSave(key, P, at, ats, lv, entryAt, old, n)
  redis.call('ZREMRANGEBYSCORE', key, 0, fmt(at - P))
  if old > 0 then
    redis.call('ZREM', key, fmt(entryAt) .. ':' .. fmt(old))
  end
  if n > 0 then
    redis.call('ZADD', key, fmt(entryAt), fmt(entryAt) .. ':' .. fmt(n))
  end
  if #ats == 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('ZADD', key, fmt(-1 - lv), 'lv')
  redis.call('PEXPIREAT', key, fmt(expiryMs(ats[#ats] + P)))
end

local function slidingLog(key, cost, p)
  local P, rate, warn, clear = p[1], p[2], p[3], p[4]
  local at, ats, ns, total, lv = logLoad(key, P)
  local skew = at - now
  local reset = 0
  if #ats > 0 then
    reset = ats[#ats] + P - now
  end
  if cost > rate then
    return {0, rate - total, -1, reset, 2, lv}, nil
  end
  local need = math.max(cost, 1)
  local allowed = total + need <= rate
  local retry = 0
  if not allowed then
    local freed = 0
    for i = 1, #ats do
      freed = freed + ns[i]
      if total - freed + need <= rate then
        retry = ats[i] + P - at + skew
        break
      end
    end
  end
  local old, n = 0, 0
  local total2 = total
  if allowed and cost > 0 then
    local k = #ats
    if k > 0 and ats[k] == at then
      old = ns[k]
      ns[k] = old + cost
    else
      ats[k + 1], ns[k + 1] = at, cost
    end
    n = ns[#ns]
    total2 = total + cost
    reset = at + P - now
  end
  local lv2 = level(lv, allowed, total2, warn, clear)
  local write = nil
  if cost > 0 then
    write = function() logSave(key, P, at, ats, lv2, at, old, n) end
  end
  return {allowed and 1 or 0, rate - total2, retry, reset, lv2, lv}, write
end

-- slidingLogRefund takes cost back from the newest entries.
local function slidingLogRefund(key, cost, p, restore)
  local P, rate, warn, clear = p[1], p[2], p[3], p[4]
  local at, ats, ns, total, lv = logLoad(key, P)
  while cost > 0 and #ats > 0 do
    local k = #ats
    local take = math.min(cost, ns[k])
    cost = cost - take
    local entryAt, old = ats[k], ns[k]
    ns[k] = old - take
    total = total - take
    if ns[k] == 0 then
      ats[k], ns[k] = nil, nil
    end
    redis.call('ZREM', key, fmt(entryAt) .. ':' .. fmt(old))
    if old - take > 0 then
      redis.call('ZADD', key, fmt(entryAt), fmt(entryAt) .. ':' .. fmt(old - take))
    end
  end
  if restore < 0 then
    restore = level(lv, true, total, warn, clear)
  end
  logSave(key, P, at, ats, restore, 0, 0, 0)
end
