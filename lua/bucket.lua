-- Token bucket, leaky bucket and GCRA: one meter (core/algo/bucket.go).
-- ARGV[3..8]: Q, T, Full, Capacity, WarnAbove, ClearBelow.
-- Value payload: off*Q + V, where the TAT in units is expire*Q - V.
local Q, T, full, cap, warn, clear =
  tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])

local x, inner, lv = load()
local expire, v = 0, 0
if x > 0 then
  v = imod(inner, Q)
  expire = x * 1000 - (inner - v) / Q
end
local d = 0
if expire > now then
  d = math.min(expire - now, idiv(9007199254740992, Q)) * Q - v
else
  expire, v, lv = 0, 0, 0
end
if cost > cap then
  return {0, idiv(math.max(full - d, 0), T), -1, d, 2, lv}
end
local need = math.max(cost, 1) * T
local allowed = d + need <= full
local retry = 0
local e2, v2 = expire, v
if not allowed then
  retry = d + need - full
elseif cost > 0 then
  d = d + need
  local units = idiv(d + Q - 1, Q)
  e2, v2 = now + units, units * Q - d
end
local lv2 = level(lv, allowed, d, warn, clear)
if cost > 0 and (e2 ~= expire or v2 ~= v or lv2 ~= lv) then
  store(e2, function(off) return off * Q + v2 end, lv2)
end
return {allowed and 1 or 0, idiv(math.max(full - d, 0), T), retry, d, lv2, lv}
