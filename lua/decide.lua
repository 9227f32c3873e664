-- decide: the ops of one request on the keys of one identity, all or
-- nothing. ARGV[2] is the number of ops; then 3 values per op: shadow (0/1),
-- limit (see limit below) and cost. KEYS[3i-2] is op i's state key,
-- KEYS[3i-1] its override key, KEYS[3i] the state key used while an override
-- limit applies (an override counts on its own, so a raise really raises).
--
-- An override key holds "x <until µs>" (blocked until then) or
-- "o <until µs> <code> <six parameters> <algorithm> <rate> <period µs>
-- <burst> <id>" (another limit until then; id, below 2^53, names this
-- override among all the key ever had, so that a refund finds its state or
-- learns it has gone: see refund.lua); it is set with a matching PXAT.
--
-- Every op is decided first. If an op that is not shadow is denied, no op
-- consumes: the denied ones store their Throttled state, and the others
-- report their state as it is (unconsumed, but allowed by their policy).
-- Otherwise every op's write is applied. The reply is 13 integers per op:
-- allowed, remaining, retry, reset, level, previous level, the instant the
-- op was decided at (µs: now, or the instant the key's state records when
-- the clock stepped back behind it; a refund names the admission by it),
-- then the override used (0 none, 1 a limit, 2 a block) and that limit's
-- algorithm number, rate, period (µs) and burst, and the override's id (0
-- when none, or when the override was written without one). A block's
-- retry and reset are in µs.
--
-- decide1 is the same for one op, with shorter arguments and reply, and
-- decideMany decides many independent ops at once.

local algos = {b = bucket, f = fixed, c = counter, l = slidingLog}

-- A limit is one argument: the code of its algorithm (b bucket, f fixed
-- window, c counter, l log) and six parameters, separated by spaces, as in
-- "b 1 1 1000000 1000000 800000 700000". limit returns the code, the
-- algorithm and the parameters. A server sees few distinct limits, so each
-- is parsed once and kept in parsed, which lives as long as the library (a
-- script's lives one call) and is emptied when it holds 1024 limits.
local parsed, nparsed = {}, 0
local function limit(s)
  local l = parsed[s]
  if not l then
    local f = {}
    for w in string.gmatch(s, '%S+') do
      f[#f + 1] = w
    end
    l = {f[1], algos[f[1]], {tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), tonumber(f[6]), tonumber(f[7])}}
    if nparsed >= 1024 then
      parsed, nparsed = {}, 0
    end
    parsed[s], nparsed = l, nparsed + 1
  end
  return l[1], l[2], l[3]
end

-- prepare reads the override of op i, whose limit is lim. It returns the
-- algorithm, the state key and the parameters that apply, then the
-- override's six reply values (all 0 when none applies). A block returns
-- nil and the time it has left in µs.
local function prepare(KEYS, i, lim)
  local raw = call('GET', KEYS[3 * i - 1])
  if raw then
    local f = {}
    for w in string.gmatch(raw, '%S+') do
      f[#f + 1] = w
    end
    local untilUs = tonumber(f[2])
    if untilUs > now then
      if f[1] == 'x' then
        return nil, untilUs - now
      end
      local p = {tonumber(f[4]), tonumber(f[5]), tonumber(f[6]), tonumber(f[7]), tonumber(f[8]), tonumber(f[9])}
      return algos[f[3]], KEYS[3 * i], p, 1, tonumber(f[10]), tonumber(f[11]), tonumber(f[12]), tonumber(f[13]), tonumber(f[14]) or 0
    end
  end
  local _, fn, p = limit(lim)
  return fn, KEYS[3 * i - 2], p, 0, 0, 0, 0, 0, 0
end

-- decideOne decides op i of KEYS at the instant t (see clock) under the
-- limit lim, for cost. One op is all or nothing by itself (shadow or not, a
-- denied op writes only its own Throttled state), so its write is made as
-- soon as it is decided, with no closure and no table but the reply: the
-- op's 13 integers, or only the first 7 when no override applies.
local function decideOne(KEYS, i, t, lim, cost)
  clock(t)
  local fn, key, p, o1, o2, o3, o4, o5, o6 = prepare(KEYS, i, lim)
  if not fn then
    local left = key
    return {0, 0, left, left, 2, 2, now, 2, 0, 0, 0, 0, 0}
  end
  local allowed, remaining, retry, reset, lv2, lv, at = fn(key, tonumber(cost), p, true)
  if o1 == 0 then
    return {allowed, remaining, retry, reset, lv2, lv, at}
  end
  return {allowed, remaining, retry, reset, lv2, lv, at, o1, o2, o3, o4, o5, o6}
end

-- decide1 decides one op: ARGV[1] is the instant, ARGV[2] the limit, ARGV[3]
-- the cost (no op count, no shadow flag); KEYS are the op's three.
local function decide1(KEYS, ARGV)
  return decideOne(KEYS, 1, ARGV[1], ARGV[2], ARGV[3])
end

-- decideMany decides independent ops one after the other, each exactly as
-- decide1 would (its own instant, its own write): KEYS holds three keys per
-- op and ARGV three values per op, as decide1's. One call instead of one per
-- op saves the server the cost of a command each, when a client has many
-- ready at once on one server. An op that fails does not stop the others:
-- as it fails before it writes, the client learns its error by sending it
-- again alone. The reply is, per op, the length of its reply (7 or 13) and
-- that reply, or -1 for an op that failed.
local function decideMany(KEYS, ARGV)
  local out = {}
  for i = 1, #KEYS / 3 do
    local b = 3 * (i - 1)
    local ok, r = pcall(decideOne, KEYS, i, ARGV[b + 1], ARGV[b + 2], ARGV[b + 3])
    if ok then
      out[#out + 1] = #r
      for j = 1, #r do
        out[#out + 1] = r[j]
      end
    else
      out[#out + 1] = -1
    end
  end
  return out
end

local function decide(KEYS, ARGV)
  clock(ARGV[1])
  local n = tonumber(ARGV[2])
  local ops, replies, writes = {}, {}, {}
  local denied = false
  for i = 1, n do
    local base = 2 + (i - 1) * 3
    local fn, key, p, o1, o2, o3, o4, o5, o6 = prepare(KEYS, i, ARGV[base + 2])
    local op = {cost = tonumber(ARGV[base + 3]), fn = fn, key = key, p = p, ov = {o1, o2, o3, o4, o5, o6}}
    local r
    if not fn then
      local left = key
      r = {0, 0, left, left, 2, 2, now}
      op.ov = {2, 0, 0, 0, 0, 0}
    else
      r = {fn(key, op.cost, p, false)}
      writes[i] = r[8]
    end
    replies[i], ops[i] = r, op
    if r[1] == 0 and op.cost > 0 and ARGV[base + 1] ~= '1' then
      denied = true
    end
  end
  local out = {}
  for i = 1, n do
    local r, op = replies[i], ops[i]
    if denied and r[1] == 1 and op.cost > 0 then
      -- allowed by its policy, but the request was denied: nothing consumed
      r = {op.fn(op.key, 0, op.p, false)}
      r[1], r[3] = 1, 0
    elseif writes[i] then
      writes[i]()
    end
    for j = 1, 7 do
      out[#out + 1] = r[j]
    end
    for j = 1, 6 do
      out[#out + 1] = op.ov[j]
    end
  end
  return out
end
