-- Sliding window counter, Cloudflare's two-window estimate
-- (core/algo/window.go). ARGV[3..7]: Period (µs), Rate, Full (Rate*Period),
-- WarnAbove, ClearBelow. Value payload: (off*M + prev)*M + cur with
-- M = Rate+1; the expiry is the end of the window after the current one.
local P, rate, full, warn, clear =
  tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local M = rate + 1

local x, inner, lv = load()
local expire, sp, sc = 0, 0, 0
if x > 0 then
  sc = imod(inner, M)
  local rest = (inner - sc) / M
  sp = imod(rest, M)
  expire = x * 1000 - (rest - sp) / M
end
local e0, p0, c0, l0 = expire, sp, sc, lv
local w = idiv(now, P)
local p, c = 0, 0
if expire ~= 0 then
  local sw = expire / P - 2
  if sw >= w then
    w, p, c = sw, sp, sc
  elseif sw == w - 1 then
    p = sc
  end
end
-- (stE, stP, stC) is what stays stored unless this request is admitted.
local stE, stP, stC = e0, p0, c0
if p == 0 and c == 0 then
  stE, stP, stC, lv = 0, 0, 0, 0
end
local start = w * P
local e = math.max(now - start, 0)
local skew = math.max(start - now, 0)
local used = p * (P - e) + c * P
local function resetAfter()
  if c > 0 then return skew + 2 * P - e end
  if p > 0 then return skew + P - e end
  return 0
end
if cost > rate then
  return {0, idiv(math.max(full - used, 0), P), -1, resetAfter(), 2, lv}
end
local need = math.max(cost, 1)
local allowed = used + need * P <= full
if allowed and cost > 0 then
  c = c + cost
  used = used + cost * P
  stE, stP, stC = (w + 2) * P, p, c
end
local retry = 0
if not allowed then
  if c + need <= rate then
    retry = skew + P - e - idiv((rate - c - need) * P, p)
  else
    retry = skew + 2 * P - e - idiv((rate - need) * P, c)
  end
end
local lv2 = level(lv, allowed, used, warn, clear)
if cost > 0 and (stE ~= e0 or stP ~= p0 or stC ~= c0 or lv2 ~= l0) then
  store(stE, function(off) return (off * M + stP) * M + stC end, lv2)
end
return {allowed and 1 or 0, idiv(math.max(full - used, 0), P), retry, resetAfter(), lv2, lv}
