-- decide: the ops of one request on the keys of one identity, all or
-- nothing. ARGV[2] is the number of ops; then 9 values per op: shadow (0/1),
-- algorithm (b bucket, f fixed window, c counter, l log), cost, and six
-- parameters. KEYS[3i-2] is op i's state key, KEYS[3i-1] its override key,
-- KEYS[3i] the state key used while an override limit applies (an override
-- counts on its own, so a raise really raises).
--
-- An override key holds "x <until µs>" (blocked until then) or
-- "o <until µs> <code> <six parameters> <algorithm> <rate> <period µs>
-- <burst>" (another limit until then); it is set with a matching PXAT.
--
-- Every op is decided first. If an op that is not shadow is denied, no op
-- consumes: the denied ones store their Throttled state, and the others
-- report their state as it is (unconsumed, but allowed by their policy).
-- Otherwise every op's write is applied. The reply is 11 integers per op:
-- allowed, remaining, retry, reset, level, previous level, then the
-- override used (0 none, 1 a limit, 2 a block) and that limit's algorithm
-- number, rate, period (µs) and burst. A block's retry and reset are in µs.

local algos = {b = bucket, f = fixed, c = counter, l = slidingLog}
local n = tonumber(ARGV[2])
local ops, replies, writes = {}, {}, {}
local denied = false
for i = 1, n do
  local base = 2 + (i - 1) * 9
  local op = {shadow = ARGV[base + 1] == '1', fn = algos[ARGV[base + 2]], cost = tonumber(ARGV[base + 3]), p = {}, ov = {0, 0, 0, 0, 0}, key = KEYS[3 * i - 2]}
  for j = 1, 6 do
    op.p[j] = tonumber(ARGV[base + 3 + j])
  end
  local raw = redis.call('GET', KEYS[3 * i - 1])
  if raw then
    local f = {}
    for w in string.gmatch(raw, '%S+') do
      f[#f + 1] = w
    end
    local untilUs = tonumber(f[2])
    if untilUs > now then
      if f[1] == 'x' then
        op.blocked = true
        op.ov = {2, 0, 0, 0, 0}
        replies[i] = {0, 0, untilUs - now, untilUs - now, 2, 2}
      else
        op.fn, op.key = algos[f[3]], KEYS[3 * i]
        for j = 1, 6 do
          op.p[j] = tonumber(f[3 + j])
        end
        op.ov = {1, tonumber(f[10]), tonumber(f[11]), tonumber(f[12]), tonumber(f[13])}
      end
    end
  end
  if not op.blocked then
    replies[i], writes[i] = op.fn(op.key, op.cost, op.p)
  end
  ops[i] = op
  if replies[i][1] == 0 and op.cost > 0 and not op.shadow then
    denied = true
  end
end
local out = {}
for i = 1, n do
  local r = replies[i]
  if denied and r[1] == 1 and ops[i].cost > 0 then
    -- allowed by its policy, but the request was denied: nothing consumed
    r = ops[i].fn(ops[i].key, 0, ops[i].p)
    r[1], r[3] = 1, 0
  elseif writes[i] then
    writes[i]()
  end
  for j = 1, 6 do
    out[#out + 1] = r[j]
  end
  for j = 1, 5 do
    out[#out + 1] = ops[i].ov[j]
  end
end
return out
