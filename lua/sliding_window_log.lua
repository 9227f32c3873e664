-- Sliding window log, exact (core/algo/log.go). ARGV[3..6]: Period (µs),
-- Rate, WarnAbove, ClearBelow.
-- The key is a sorted set: one member "<at>:<n>" per admission instant, scored
-- by the instant, and the member "lv" scored -1-level. The key expires when
-- its newest entry leaves the window. Cost: O(entries in the window), at most
-- Rate (capped by core.MaxLogRate).
local P, rate, warn, clear = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])

local lv = 0
local ls = redis.call('ZSCORE', key, 'lv')
if ls then
  lv = -1 - tonumber(ls)
end
local at = now
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if #last == 2 and last[1] ~= 'lv' and tonumber(last[2]) > at then
  at = tonumber(last[2]) -- the clock stepped back: decide at the newest instant
end
local skew = at - now
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
local reset = 0
if #ats > 0 then
  reset = ats[#ats] + P - now
end
if cost > rate then
  return {0, rate - total, -1, reset, 2, lv}
end
local need = math.max(cost, 1)
local allowed = total + need <= rate
if allowed and cost > 0 then
  local k = #ats
  if k > 0 and ats[k] == at then
    redis.call('ZREM', key, fmt(at) .. ':' .. fmt(ns[k]))
    ns[k] = ns[k] + cost
  else
    ats[k + 1], ns[k + 1] = at, cost
  end
  redis.call('ZADD', key, fmt(at), fmt(at) .. ':' .. fmt(ns[#ns]))
  total = total + cost
  reset = at + P - now
end
local lv2 = level(lv, allowed, total, warn, clear)
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
if cost > 0 then
  redis.call('ZREMRANGEBYSCORE', key, 0, fmt(at - P))
  if #ats == 0 then
    redis.call('DEL', key)
  else
    redis.call('ZADD', key, fmt(-1 - lv2), 'lv')
    local e = ats[#ats] + P
    local x = idiv(e, 1000)
    if x * 1000 < e then
      x = x + 1
    end
    redis.call('PEXPIREAT', key, fmt(x))
  end
end
return {allowed and 1 or 0, rate - total, retry, reset, lv2, lv}
