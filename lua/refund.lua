-- refund: give back the units of earlier admissions, each exactly or not at
-- all (see docs/algorithms.md, "Refunds"). ARGV[2] is the number of ops; then
-- 5 values per op: the level to restore (-1: follow the lower usage), the
-- limit (as in decide.lua), the cost, the instant the admission was decided
-- at (the 7th integer of its decision's reply), and what the caller knows of
-- the decision: -1 when it names the admission by its instant only (a
-- response-based refund), or, when it undoes a decision it has just received
-- (an all-or-nothing decision across identities), the decision's reset (4th
-- integer: for a bucket, its debt right after the admission, in units).
-- KEYS[i] is op i's state key. The reply is, per op, the 7 integers of a peek
-- after the refund.

local refunds = {b = bucketRefund, f = fixedRefund, c = counterRefund, l = slidingLogRefund}

local function refund(KEYS, ARGV)
  clock(ARGV[1])
  local n = tonumber(ARGV[2])
  local out = {}
  for i = 1, n do
    local base = 2 + (i - 1) * 5
    local code, fn, p = limit(ARGV[base + 2])
    local cost = tonumber(ARGV[base + 3])
    if cost > 0 then
      refunds[code](KEYS[i], cost, p, tonumber(ARGV[base + 1]), tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]))
    end
    local r = {fn(KEYS[i], 0, p, false)}
    for j = 1, 7 do
      out[#out + 1] = r[j]
    end
  end
  return out
end
