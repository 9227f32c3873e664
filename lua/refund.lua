-- refund: give back the units of earlier admissions, each exactly or not at
-- all (see docs/algorithms.md, "Refunds"). ARGV[2] is the number of ops; then
-- 6 values per op: the level to restore (-1: follow the lower usage), the
-- limit (as in decide.lua), the cost, the instant the admission was decided
-- at (the 7th integer of its decision's reply), what the caller knows of
-- the decision: -1 when it names the admission by its instant only (a
-- response-based refund), or, when it undoes a decision it has just received
-- (an all-or-nothing decision across identities), the decision's reset (4th
-- integer: for a bucket, its debt right after the admission, in units), and
-- the id of the override the admission was made under (13th integer; 0:
-- none). KEYS[2i-1] is op i's state key: the key's own state, or, for an
-- admission under an override, the override's state (KEYS[3i] of
-- decide.lua); KEYS[2i] is op i's override key.
--
-- An admission under an override is given back to the override's state,
-- under the override's limit (read from its key), only while that same
-- override is in force: once it has ended or been replaced (its state was
-- deleted with it), nothing is given back, so no unit ever reaches another
-- override's state or the key's own. The reply is, per op, the 7 integers
-- of a peek after the refund, then 1 if the refund was made, or 8 zeros
-- when the override has gone.

local refunds = {b = bucketRefund, f = fixedRefund, c = counterRefund, l = slidingLogRefund}

-- overridden returns the code, step function and parameters of the override
-- in KEYS[2i] if it is the one named id and still in force, else nil.
local function overridden(KEYS, i, id)
  local raw = call('GET', KEYS[2 * i])
  if not raw then
    return nil
  end
  local f = {}
  for w in string.gmatch(raw, '%S+') do
    f[#f + 1] = w
  end
  if f[1] ~= 'o' or tonumber(f[2]) <= now or f[14] ~= id then
    return nil
  end
  return f[3], algos[f[3]], {tonumber(f[4]), tonumber(f[5]), tonumber(f[6]), tonumber(f[7]), tonumber(f[8]), tonumber(f[9])}
end

local function refund(KEYS, ARGV)
  clock(ARGV[1])
  local n = tonumber(ARGV[2])
  local out = {}
  for i = 1, n do
    local base = 2 + (i - 1) * 6
    local code, fn, p
    local id = ARGV[base + 6]
    if id == '0' then
      code, fn, p = limit(ARGV[base + 2])
    else
      code, fn, p = overridden(KEYS, i, id)
    end
    if not code then
      for _ = 1, 8 do
        out[#out + 1] = 0
      end
    else
      local key = KEYS[2 * i - 1]
      local cost = tonumber(ARGV[base + 3])
      if cost > 0 then
        refunds[code](key, cost, p, tonumber(ARGV[base + 1]), tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]))
      end
      local r = {fn(key, 0, p, false)}
      for j = 1, 7 do
        out[#out + 1] = r[j]
      end
      out[#out + 1] = 1
    end
  end
  return out
end
