-- Fixed window on windows aligned to multiples of the period
-- (core/algo/window.go). ARGV[3..6]: Period (µs), Rate, WarnAbove, ClearBelow.
-- Value payload: off*(Rate+1) + count; the expiry is the window's end.
local P, rate, warn, clear = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local M = rate + 1

local x, inner, lv = load()
local expire, count = 0, 0
if x > 0 then
  count = imod(inner, M)
  expire = x * 1000 - (inner - count) / M
end
local e0, c0, l0 = expire, count, lv
local stride = idiv(now, P)
local wend = (stride + 1) * P
if expire > wend then
  wend = expire -- the clock stepped back: keep the newer window
elseif expire < wend then
  expire, count, lv = 0, 0, 0
end
local reset = 0
if count > 0 then
  reset = wend - now
end
if cost > rate then
  return {0, rate - count, -1, reset, 2, lv}
end
local allowed = count + math.max(cost, 1) <= rate
local retry = 0
if allowed and cost > 0 then
  expire, count, reset = wend, count + cost, wend - now
end
if not allowed then
  retry = wend - now
end
local lv2 = level(lv, allowed, count, warn, clear)
if cost > 0 and (expire ~= e0 or count ~= c0 or lv2 ~= l0) then
  store(expire, function(off) return off * M + count end, lv2)
end
return {allowed and 1 or 0, rate - count, retry, reset, lv2, lv}
