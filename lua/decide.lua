-- decide: the ops of one request on the keys of one identity, all or
-- nothing. ARGV[2] is the number of ops; then 9 values per op: shadow (0/1),
-- algorithm (b bucket, f fixed window, c counter, l log), cost, and six
-- parameters. KEYS[i] is op i's key.
--
-- Every op is decided first. If an op that is not shadow is denied, no op
-- consumes: the denied ones store their Throttled state, and the others
-- report their state as it is (unconsumed, but allowed by their policy).
-- Otherwise every op's write is applied. The reply is 6 integers per op:
-- allowed, remaining, retry, reset, level, previous level.

local algos = {b = bucket, f = fixed, c = counter, l = slidingLog}
local n = tonumber(ARGV[2])
local ops, replies, writes = {}, {}, {}
local denied = false
for i = 1, n do
  local base = 2 + (i - 1) * 9
  local op = {shadow = ARGV[base + 1] == '1', fn = algos[ARGV[base + 2]], cost = tonumber(ARGV[base + 3]), p = {}}
  for j = 1, 6 do
    op.p[j] = tonumber(ARGV[base + 3 + j])
  end
  ops[i] = op
  replies[i], writes[i] = op.fn(KEYS[i], op.cost, op.p)
  if replies[i][1] == 0 and op.cost > 0 and not op.shadow then
    denied = true
  end
end
local out = {}
for i = 1, n do
  local r = replies[i]
  if denied and r[1] == 1 and ops[i].cost > 0 then
    -- allowed by its policy, but the request was denied: nothing consumed
    r = ops[i].fn(KEYS[i], 0, ops[i].p)
    r[1], r[3] = 1, 0
  elseif writes[i] then
    writes[i]()
  end
  for j = 1, 6 do
    out[#out + 1] = r[j]
  end
end
return out
