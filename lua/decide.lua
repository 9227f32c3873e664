-- decide: the ops of one request on the keys of one identity, all or
-- nothing. Each op has three keys: its state key, its override key, and the
-- state key used while an override limit applies (an override counts on its
-- own, so a raise really raises); its arguments are shadow (0/1), limit (see
-- limit below) and cost.
--
-- The layout of the arguments and replies of every entry point (decide,
-- decide1, decideMany, refund) is the table "The script protocol" in
-- core/redisstore/protocol.go; the names below are its offsets, 1-based, as
-- the Go constants of the same meaning are 0-based.
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
-- Otherwise every op's write is applied. The reply is OP_REPLY integers per
-- op: the OUTCOME_LEN integers of its outcome (allowed, remaining, retry,
-- reset, state, previous state, and the instant the op was decided at, µs:
-- now, or the instant the key's state records when the clock stepped back
-- behind it; a refund names the admission by it), then the override used
-- (OVERRIDE_NONE, OVERRIDE_LIMIT, OVERRIDE_BLOCK) and that limit's
-- algorithm number, rate, period (µs) and burst, and the override's id (0
-- when none, or when the override was written without one), then what the
-- waits of the key as a whole need (see handover): the µs the override has
-- left, and what the key's own state answers at its end. A block's retry
-- and reset are in µs.
--
-- decide1 is the same for one op, with shorter arguments and a short
-- reply (SHORT_LEN integers, see below), and decideMany decides many
-- independent ops at once, with shorter arguments still.

-- KEYS of one op (KEYS[KEYS_PER_OP * (i - 1) + KEY_STATE] is op i's state).
local KEYS_PER_OP, KEY_STATE, KEY_OVERRIDE, KEY_OVERRIDE_STATE = 3, 1, 2, 3
-- ARGV: decide and refund start with the instant and the number of ops
-- (ARGV_HEAD); decide then has ARGS_PER_OP per op, decide1 DECIDE1_ARGS
-- (decideMany's are below it).
local ARG_NOW, ARG_COUNT, ARGV_HEAD = 1, 2, 2
local ARGS_PER_OP, ARG_SHADOW, ARG_LIMIT, ARG_COST = 3, 1, 2, 3
local DECIDE1_ARGS, ARG1_NOW, ARG1_LIMIT, ARG1_COST = 3, 1, 2, 3
-- decide1 alone takes one more, optional: the longest booking in µs
-- (absent or 0: a take; see bucket in bucket.lua). It follows the
-- DECIDE1_ARGS.
local ARG1_BOOK = DECIDE1_ARGS + 1
-- The reply of one op: OUTCOME_LEN integers (as the step functions return
-- them), then, under an override, the rest up to OP_REPLY: the override
-- up to OV_REPLY, then the handover's HANDOVER_LEN (see handover).
local OUTCOME_LEN, OV_REPLY, HANDOVER_LEN = 7, 13, 4
local OP_REPLY = OV_REPLY + HANDOVER_LEN
local OVERRIDE_NONE, OVERRIDE_LIMIT, OVERRIDE_BLOCK = 0, 1, 2
-- decide's optional last argument (after the ops): '1' for an undoable
-- call, whose replies carry UNDO_LEN more integers per op, the first
-- UNDO_NONE, UNDO_STRING or UNDO_LOG (see written).
local ARG_UNDOABLE = 1
local UNDO_LEN, UNDO_NONE, UNDO_STRING, UNDO_LOG = 8, 0, 1, 2
-- The fields of an override key's value.
local OV_KIND, OV_UNTIL, OV_CODE, OV_PARAMS, OV_LIMIT, OV_ID = 1, 2, 3, 4, 10, 14

local algos = {b = bucket, f = fixed, c = counter, l = slidingLog}

-- A limit is one argument: the code of its algorithm (b bucket, f fixed
-- window, c counter, l log) and six parameters, separated by spaces, as in
-- "b 1 1 1000000 1000000 800000 700000". limit returns the code, the
-- algorithm and the parameters. A server sees few distinct limits, so each
-- is parsed once and kept in parsed, which lives as long as the library (a
-- script's lives one call) and is emptied when it holds 1024 limits.
local parsed, nparsed = {}, 0
local function parseLimit(s)
  local f = {}
  for w in string.gmatch(s, '%S+') do
    f[#f + 1] = w
  end
  local l = {f[1], algos[f[1]], {tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), tonumber(f[6]), tonumber(f[7])}}
  if nparsed >= 1024 then
    parsed, nparsed = {}, 0
  end
  parsed[s], nparsed = l, nparsed + 1
  return l
end

local function limit(s)
  local l = parsed[s] or parseLimit(s)
  return l[1], l[2], l[3]
end

-- overrideOf returns the fields of an override key's value raw: kind ('x'
-- or 'o'), untilUs, and, for 'o', the code of its limit, its step function
-- fn, its six parameters p, its id as written (nil: none) and reply, the
-- override's six reply values (OVERRIDE_LIMIT, the algorithm number, rate,
-- period, burst, and the id, 0 for none). The few overrides in force are
-- each parsed once and kept, as limits are (up to 1024).
local overrides, noverrides = {}, 0
local function overrideOf(raw)
  local o = overrides[raw]
  if o then
    return o
  end
  local f = {}
  for w in string.gmatch(raw, '%S+') do
    f[#f + 1] = w
  end
  o = {kind = f[OV_KIND], untilUs = tonumber(f[OV_UNTIL]), code = f[OV_CODE], fn = algos[f[OV_CODE]], id = f[OV_ID]}
  if o.kind == 'o' then
    local a, b = OV_PARAMS, OV_LIMIT
    o.p = {tonumber(f[a]), tonumber(f[a + 1]), tonumber(f[a + 2]), tonumber(f[a + 3]), tonumber(f[a + 4]), tonumber(f[a + 5])}
    o.reply = {OVERRIDE_LIMIT, tonumber(f[b]), tonumber(f[b + 1]), tonumber(f[b + 2]), tonumber(f[b + 3]), tonumber(f[OV_ID]) or 0}
  end
  if noverrides >= 1024 then
    overrides, noverrides = {}, 0
  end
  overrides[raw], noverrides = o, noverrides + 1
  return o
end

-- prepare reads the override of an op (raw: its override key's value, nil
-- for none; okey: that key, whose override state is okeys, or okey..':s'
-- when okeys is nil), whose state key is key and limit lim. It returns the
-- algorithm, the state key and the parameters that apply, then the
-- override's six reply values (all 0 when none applies), then, under an
-- override limit, the µs it has left. A block returns nil and the time it
-- has left in µs.
local function prepare(raw, key, okey, okeys, lim)
  if raw then
    local o = overrideOf(raw)
    if o.untilUs > now then
      if o.kind == 'x' then
        return nil, o.untilUs - now
      end
      local r = o.reply
      return o.fn, okeys or okey .. ':s', o.p, r[1], r[2], r[3], r[4], r[5], r[6], o.untilUs - now
    end
  end
  local _, fn, p = limit(lim)
  return fn, key, p, OVERRIDE_NONE, 0, 0, 0, 0, 0
end

-- waitUs is a wait of a reply (a retry or a reset: in units of 1/q µs, or
-- µs encoded as -2 - µs, see algo.Micros) in whole µs, rounded up as
-- Spec.Duration rounds it; -1 (never) stays -1.
local function waitUs(x, q)
  if x == -1 then
    return -1
  elseif x < -1 then
    return -2 - x
  elseif x <= 0 then
    return 0
  end
  return idiv(x + q - 1, q)
end

-- ownAt returns what the state key under the step function fn and the
-- parameters p answers at the instant at, writing nothing: allowed and
-- retry of a request of cost there, and reset of a peek there (ownAt in
-- core/memorystore).
local function ownAt(fn, key, p, at, cost)
  local saved = now
  now = at
  local allowed, _, retry, reset = fn(key, 0, p, false)
  if cost > 0 then
    local a, _, r = fn(key, cost, p, false)
    allowed, retry = a, r
  end
  now = saved
  return allowed, retry, reset
end

-- handover fills the HANDOVER_LEN values after OV_REPLY of r, the reply
-- of an op (its state key key, its limit lim, its cost) decided under an
-- override or a block that has left µs to go, whose waits are in units of
-- 1/q µs (1 for a block's): left, then what the key's own state answers at
-- the override's end (ownAt: allowed, retry, reset), peeked only when the
-- waits depend on it (algo.HandoverNeeds; always when always is set),
-- allowed -1 otherwise. Go makes the waits of the key as a whole from them
-- (algo.Spec.Handover), for both stores alike.
local function handover(key, lim, cost, r, left, q, always)
  local retry = r[1] == 0 and (r[3] == -1 or waitUs(r[3], q) >= left)
  local reset = waitUs(r[4], q) >= left
  local allowed, wait, fresh = -1, 0, 0
  if retry or reset or always then
    local _, fn, p = limit(lim)
    allowed, wait, fresh = ownAt(fn, key, p, now + left, cost)
  end
  r[OV_REPLY + 1], r[OV_REPLY + 2], r[OV_REPLY + 3], r[OV_REPLY + 4] = left, allowed, wait, fresh
  return r
end

-- unitsOf is q of handover for the waits of fn's replies under the
-- parameters p: a bucket's Q, 1 (µs) for a window.
local function unitsOf(fn, p)
  if fn == bucket then
    return p[1]
  end
  return 1
end

-- The short reply of one op, of decide1 and of each op of decideMany:
-- SHORT_LEN integers, the first of them the flags allowed + 2*state +
-- 8*previous state (+ SHORT_OVERRIDE when the override's part follows),
-- then remaining, retry, reset and the instant decided at; under an
-- override or a block, the OV_REPLY - OUTCOME_LEN integers of the override
-- and the HANDOVER_LEN of the handover follow (SHORT_OV_LEN in all).
local SHORT_LEN, SHORT_OVERRIDE = 5, 32
local SHORT_OV_LEN = SHORT_LEN + OP_REPLY - OUTCOME_LEN

-- putLong writes r, a reply of OP_REPLY integers (an op under an override
-- or a block), as a short reply into out after its n-th element, its
-- instant less base, and returns the index of its last element.
local function putLong(out, n, r, base)
  if not out then
    -- decide1's reply: a table made at its size (filling an empty one grows it four times)
    return {r[1] + 2 * r[5] + 8 * r[6] + SHORT_OVERRIDE, r[2], r[3], r[4], r[7] - base, r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15], r[16], r[17]}
  end
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = r[1] + 2 * r[5] + 8 * r[6] + SHORT_OVERRIDE, r[2], r[3], r[4], r[7] - base
  n = n + SHORT_LEN
  for j = OUTCOME_LEN + 1, OP_REPLY do
    out[n + j - OUTCOME_LEN] = r[j]
  end
  return n + OP_REPLY - OUTCOME_LEN
end

-- decideOne decides an op at the instant now: its state key, its override
-- key okey and override state okeys (nil: okey..':s'), raw the override
-- key's value (nil: none), its limit lim, its cost (a number), booking up
-- to book µs ahead (nil: a take; a window, the policy's or an override's,
-- never books). One op is all or nothing by itself (shadow or not, a
-- denied op writes only its own Throttled state), so its write is made as
-- soon as it is decided, with no closure. Its short reply goes into out
-- after its n-th element, its instant less base (decideMany's reply gives
-- the instant of its call once), and decideOne returns the index of its
-- last element; nothing is written to out before the op is decided, so an op
-- that fails leaves out as it was. With out nil (decide1), it returns the
-- reply as a table of its own.
local function decideOne(key, okey, okeys, raw, lim, cost, book, out, n, base)
  local fn, skey, p, o1, o2, o3, o4, o5, o6, left = prepare(raw, key, okey, okeys, lim)
  if not fn then
    left = skey
    return putLong(out, n, handover(key, lim, cost, {0, 0, left, left, 2, 2, now, OVERRIDE_BLOCK, 0, 0, 0, 0, 0}, left, 1, false), base)
  end
  if book and left then
    -- A slot is admitted under the limit in force at it: the override's
    -- only before it ends.
    book = math.min(book, left - 1)
  end
  local allowed, remaining, retry, reset, state, prevState, at = fn(skey, cost, p, true, book)
  if o1 == OVERRIDE_NONE then
    if not out then
      return {allowed + 2 * state + 8 * prevState, remaining, retry, reset, at - base}
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = allowed + 2 * state + 8 * prevState, remaining, retry, reset, at - base
    return n + SHORT_LEN
  end
  local r = {allowed, remaining, retry, reset, state, prevState, at, o1, o2, o3, o4, o5, o6}
  return putLong(out, n, handover(key, lim, cost, r, left, unitsOf(fn, p), false), base)
end

-- decide1 decides one op: ARGV is the instant, the limit and the cost (no op
-- count, no shadow flag), then, optionally, the longest booking (ARG1_BOOK);
-- KEYS are the op's three. Its reply is the op's short reply.
local function decide1(KEYS, ARGV)
  local book = ARGV[ARG1_BOOK]
  if book then
    book = tonumber(book)
  end
  clock(ARGV[ARG1_NOW])
  return decideOne(KEYS[KEY_STATE], KEYS[KEY_OVERRIDE], KEYS[KEY_OVERRIDE_STATE], call('GET', KEYS[KEY_OVERRIDE]), ARGV[ARG1_LIMIT], num(ARGV[ARG1_COST]), book, nil, 0, 0)
end

-- decideMany decides independent ops one after the other, each exactly as
-- decide1 would (its own write), all at one instant: one call instead of
-- one per op saves the server the cost of a command each, and of a TIME
-- each, when a client has many ready at once on one server (a standalone
-- one: every key of the call lives there). Its layout is shorter than
-- decide1's: KEYS holds MANY_KEYS keys per op, its state and its override
-- (the override's state is the override key and ':s', made here only when
-- an override limit applies); ARGV is the instant of every op (ARGM_NOW),
-- the number of distinct limits (ARGM_LIMITS), those limits, then per op
-- its cost when there is one limit, or else the index of its limit
-- (1-based) and its cost; or, when every op has the same limit and cost,
-- 0 (at ARGM_LIMITS), that limit and that cost. The reply is the instant of the call, then each
-- op's short reply with its instant less that one (a few digits, not
-- sixteen, to format and to parse), or -1 for an op that failed: as an op fails before it writes, the client learns its
-- error by sending it again alone, and the ops after it are decided all
-- the same.
local MANY_KEYS, ARGM_NOW, ARGM_LIMITS = 2, 1, 2

-- manyAt and manyN are how far manyOps got: the op it is deciding, and the
-- index of the last element of the reply before that op's.
local manyAt, manyN = 0, 0

-- manyOps decides the ops of a decideMany call from the from-th on, into
-- out after its n-th element, in one protected call for them all (see
-- decideMany).
local function manyOps(KEYS, ARGV, from, out, n)
  manyAt, manyN = from, n
  local nl = num(ARGV[ARGM_LIMITS])
  local lim = ARGV[ARGM_LIMITS + 1]
  local base = ARGM_LIMITS + nl -- the ARGV before the ops'
  local same = nil -- the cost of every op, when they share it
  if nl == 0 then
    same = num(ARGV[ARGM_LIMITS + 2])
  end
  for i = from, #KEYS / MANY_KEYS do
    manyAt, manyN = i, n
    local cost = same
    if not same then
      if nl == 1 then
        cost = ARGV[base + i]
      else
        local a = base + 2 * i - 1
        lim, cost = ARGV[ARGM_LIMITS + num(ARGV[a])], ARGV[a + 1]
      end
      cost = nums[cost] or num(cost)
    end
    local key, okey = KEYS[MANY_KEYS * i - 1], KEYS[MANY_KEYS * i]
    local raw = call('GET', okey)
    if raw then
      n = decideOne(key, okey, nil, raw, lim, cost, nil, out, n, now)
    else
      -- no override: the step function of the limit, with no more calls
      local l = parsed[lim] or parseLimit(lim)
      local allowed, remaining, retry, reset, state, prevState, at = l[2](key, cost, l[3], true)
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = allowed + 2 * state + 8 * prevState, remaining, retry, reset, at - now
      n = n + SHORT_LEN
    end
  end
end

local function decideMany(KEYS, ARGV)
  clock(ARGV[ARGM_NOW])
  local out, from, n, ops = {now}, 1, 1, #KEYS / MANY_KEYS
  while from <= ops and not pcall(manyOps, KEYS, ARGV, from, out, n) do
    -- op manyAt failed (before it wrote anything): -1 in its place, and on
    -- with the next
    n = manyN + 1
    out[n] = -1
    from = manyAt + 1
  end
  return out
end

-- stateOf returns what undo compares and restores of a string state
-- key: its value (-1: none) and its expiry in ms (PEXPIRETIME: -2 when the
-- key does not exist).
local function stateOf(key)
  local raw = call('GET', key)
  return raw and tonumber(raw) or -1, call('PEXPIRETIME', key)
end

-- written applies op's write, and, when the call is undoable, returns the
-- UNDO_LEN integers that let undo (refund.lua) take it back exactly:
-- UNDO_STRING, the value and expiry before, then after (every algorithm
-- but the log); UNDO_LOG, the entry's instant, its count before (-1: none)
-- and after, the warning state before (-1: none) and after, and the
-- expiry before and after.
local function written(op, write, undo)
  if not undo then
    write()
    return nil
  end
  if op.fn ~= slidingLog then
    local v0, x0 = stateOf(op.key)
    write()
    local v1, x1 = stateOf(op.key)
    return {UNDO_STRING, v0, x0, v1, x1, 0, 0, 0}
  end
  local x0 = call('PEXPIRETIME', op.key)
  logWrote = nil
  write()
  local w = logWrote
  if not w then
    return nil
  end
  return {UNDO_LOG, w[1], w[2], w[3], w[4], w[5], x0, call('PEXPIRETIME', op.key)}
end

-- decide decides the ops of one request; with the optional trailing
-- argument ARG_UNDOABLE '1' (a part of a group decided in several scripts,
-- on a Cluster), it is undoable: each op's reply is followed by UNDO_LEN
-- integers (all zero when it wrote nothing) that undo, in refund.lua,
-- takes back exactly, and the log keeps its stale entries.
local function decide(KEYS, ARGV)
  clock(ARGV[ARG_NOW])
  local n = tonumber(ARGV[ARG_COUNT])
  local undo = ARGV[ARGV_HEAD + n * ARGS_PER_OP + ARG_UNDOABLE] == '1'
  undoable = undo
  local ops, replies, writes = {}, {}, {}
  local denied = false
  for i = 1, n do
    local base = ARGV_HEAD + (i - 1) * ARGS_PER_OP
    local lim = ARGV[base + ARG_LIMIT]
    local k = KEYS_PER_OP * (i - 1)
    local fn, key, p, o1, o2, o3, o4, o5, o6, left = prepare(call('GET', KEYS[k + KEY_OVERRIDE]), KEYS[k + KEY_STATE], KEYS[k + KEY_OVERRIDE], KEYS[k + KEY_OVERRIDE_STATE], lim)
    local op = {cost = num(ARGV[base + ARG_COST]), fn = fn, key = key, p = p, ov = {o1, o2, o3, o4, o5, o6}, lim = lim, left = left}
    local r
    if not fn then
      op.left = key
      r = {0, 0, op.left, op.left, 2, 2, now}
      op.ov = {OVERRIDE_BLOCK, 0, 0, 0, 0, 0}
    else
      r = {fn(key, op.cost, p, false)}
      writes[i] = r[OUTCOME_LEN + 1] -- the step function's write, after its outcome
    end
    replies[i], ops[i] = r, op
    if r[1] == 0 and op.cost > 0 and ARGV[base + ARG_SHADOW] ~= '1' then
      denied = true
    end
  end
  local out = {}
  for i = 1, n do
    local r, op = replies[i], ops[i]
    local u = nil
    if denied and r[1] == 1 and op.cost > 0 then
      -- allowed by its policy, but the request was denied: nothing consumed
      r = {op.fn(op.key, 0, op.p, false)}
      r[1], r[3] = 1, 0
    elseif writes[i] then
      u = written(op, writes[i], undo)
    end
    local h = {}
    if op.ov[1] ~= OVERRIDE_NONE then
      local q = op.ov[1] == OVERRIDE_LIMIT and unitsOf(op.fn, op.p) or 1
      -- undoable: peeked whatever the reply, which an undo may change
      h = handover(KEYS[KEYS_PER_OP * (i - 1) + KEY_STATE], op.lim, op.cost, r, op.left, q, undo)
    end
    for j = 1, OUTCOME_LEN do
      out[#out + 1] = r[j]
    end
    for j = 1, OV_REPLY - OUTCOME_LEN do
      out[#out + 1] = op.ov[j]
    end
    for j = OV_REPLY + 1, OP_REPLY do
      out[#out + 1] = h[j] or 0
    end
    if undo then
      for j = 1, UNDO_LEN do
        out[#out + 1] = u and u[j] or 0
      end
    end
  end
  undoable = false
  return out
end
