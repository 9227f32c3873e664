-- refund: give back units of earlier admissions, never below a fresh state.
-- ARGV[2] is the number of ops; then 3 values per op as in decide.lua, except
-- that the first is the level to restore (-1: follow the lower usage). An
-- all-or-nothing decision across identities undoes an admission this way.
-- KEYS[i] is op i's state key. The reply is, per op, the 6 integers of a
-- peek after the refund.

local refunds = {b = bucketRefund, f = fixedRefund, c = counterRefund, l = slidingLogRefund}

local function refund(KEYS, ARGV)
  clock(ARGV[1])
  local n = tonumber(ARGV[2])
  local out = {}
  for i = 1, n do
    local base = 2 + (i - 1) * 3
    local code, fn, p = limit(ARGV[base + 2])
    local cost = tonumber(ARGV[base + 3])
    if cost > 0 then
      refunds[code](KEYS[i], cost, p, tonumber(ARGV[base + 1]))
    end
    local r = {fn(KEYS[i], 0, p, false)}
    for j = 1, 6 do
      out[#out + 1] = r[j]
    end
  end
  return out
end
