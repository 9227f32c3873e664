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
-- decide1 is the same for one op, with shorter arguments and reply, and
-- decideMany decides many independent ops at once.

-- KEYS of one op (KEYS[KEYS_PER_OP * (i - 1) + KEY_STATE] is op i's state).
local KEYS_PER_OP, KEY_STATE, KEY_OVERRIDE, KEY_OVERRIDE_STATE = 3, 1, 2, 3
-- ARGV: decide and refund start with the instant and the number of ops
-- (ARGV_HEAD); decide then has ARGS_PER_OP per op, decide1 (and each op of
-- decideMany) DECIDE1_ARGS.
local ARG_NOW, ARG_COUNT, ARGV_HEAD = 1, 2, 2
local ARGS_PER_OP, ARG_SHADOW, ARG_LIMIT, ARG_COST = 3, 1, 2, 3
local DECIDE1_ARGS, ARG1_NOW, ARG1_LIMIT, ARG1_COST = 3, 1, 2, 3
-- decide1 alone takes one more, optional: the longest booking in µs
-- (absent or 0: a take; see bucket in bucket.lua). It follows the
-- DECIDE1_ARGS, so decideMany's layout is unchanged.
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

-- prepare reads the override of op i, whose limit is lim. It returns the
-- algorithm, the state key and the parameters that apply, then the
-- override's six reply values (all 0 when none applies), then, under an
-- override limit, the µs it has left. A block returns nil and the time it
-- has left in µs.
local function prepare(KEYS, i, lim)
  local k = KEYS_PER_OP * (i - 1)
  local raw = call('GET', KEYS[k + KEY_OVERRIDE])
  if raw then
    local o = overrideOf(raw)
    if o.untilUs > now then
      if o.kind == 'x' then
        return nil, o.untilUs - now
      end
      local r = o.reply
      return o.fn, KEYS[k + KEY_OVERRIDE_STATE], o.p, r[1], r[2], r[3], r[4], r[5], r[6], o.untilUs - now
    end
  end
  local _, fn, p = limit(lim)
  return fn, KEYS[k + KEY_STATE], p, OVERRIDE_NONE, 0, 0, 0, 0, 0
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
-- of op i of KEYS (its limit lim, its cost) decided under an override or a
-- block that has left µs to go, whose waits are in units of 1/q µs (1 for
-- a block's): left, then what the key's own state answers at the
-- override's end (ownAt: allowed, retry, reset), peeked only when the
-- waits depend on it (algo.HandoverNeeds; always when always is set),
-- allowed -1 otherwise. Go makes the waits of the key as a whole from them
-- (algo.Spec.Handover), for both stores alike.
local function handover(KEYS, i, lim, cost, r, left, q, always)
  local retry = r[1] == 0 and (r[3] == -1 or waitUs(r[3], q) >= left)
  local reset = waitUs(r[4], q) >= left
  local allowed, wait, fresh = -1, 0, 0
  if retry or reset or always then
    local _, fn, p = limit(lim)
    allowed, wait, fresh = ownAt(fn, KEYS[KEYS_PER_OP * (i - 1) + KEY_STATE], p, now + left, cost)
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

-- decideOne decides op i of KEYS at the instant now under the limit lim,
-- for cost, booking up to book µs ahead (nil: a take; a window, the
-- policy's or an override's, never books). One op is all or nothing by
-- itself (shadow or not, a denied op writes only its own Throttled state),
-- so its write is made as soon as it is decided, with no closure. Its
-- reply is the op's OP_REPLY integers, or only the first OUTCOME_LEN when
-- no override applies: a table of its own when out is nil (decide1);
-- otherwise it goes into out after its n-th element, preceded by its
-- length when counted is set (decideMany's layout), and decideOne returns
-- the index of its last element. Nothing is written to out before the op
-- is decided, so an op that fails leaves out as it was.
local function decideOne(KEYS, i, lim, cost, book, out, n, counted)
  cost = num(cost)
  local fn, key, p, o1, o2, o3, o4, o5, o6, left = prepare(KEYS, i, lim)
  local r
  if not fn then
    left = key
    r = handover(KEYS, i, lim, cost, {0, 0, left, left, 2, 2, now, OVERRIDE_BLOCK, 0, 0, 0, 0, 0}, left, 1, false)
  else
    if book and left then
      -- A slot is admitted under the limit in force at it: the override's
      -- only before it ends.
      book = math.min(book, left - 1)
    end
    local allowed, remaining, retry, reset, state, prevState, at = fn(key, cost, p, true, book)
    if o1 == OVERRIDE_NONE then
      if not out then
        return {allowed, remaining, retry, reset, state, prevState, at}
      end
      -- the usual reply, written in place: no table made and copied
      if counted then
        n = n + 1
        out[n] = OUTCOME_LEN
      end
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7] = allowed, remaining, retry, reset, state, prevState, at
      return n + OUTCOME_LEN
    end
    r = {allowed, remaining, retry, reset, state, prevState, at, o1, o2, o3, o4, o5, o6}
    r = handover(KEYS, i, lim, cost, r, left, unitsOf(fn, p), false)
  end
  if not out then
    return r
  end
  if counted then
    n = n + 1
    out[n] = #r
  end
  for j = 1, #r do
    out[n + j] = r[j]
  end
  return n + #r
end

-- decide1 decides one op: ARGV is the instant, the limit and the cost (no op
-- count, no shadow flag), then, optionally, the longest booking (ARG1_BOOK);
-- KEYS are the op's three.
local function decide1(KEYS, ARGV)
  local book = ARGV[ARG1_BOOK]
  if book then
    book = tonumber(book)
  end
  clock(ARGV[ARG1_NOW])
  return decideOne(KEYS, 1, ARGV[ARG1_LIMIT], ARGV[ARG1_COST], book)
end

-- decideMany decides independent ops one after the other, each exactly as
-- decide1 would (its own write): KEYS holds three keys per op and ARGV
-- three values per op, as decide1's. The ops on Redis TIME ("-1") are
-- decided at one instant, read once for the call, as if they had arrived
-- in the same µs (an op of the caller's instant at its own). One call
-- instead of one per op saves the server the cost of a command each, and
-- of a TIME each, when a client has many ready at once on one server. An
-- op that fails does not stop the others: as it fails before it writes,
-- the client learns its error by sending it again alone. The reply is, per
-- op, the length of its reply (OUTCOME_LEN or OP_REPLY) and that reply, or
-- -1 for an op that failed.
local manyNow = nil -- the Redis TIME of the decideMany call, once read

-- manyOp decides op i of a decideMany call at the instant t into out
-- after its n-th element (see decideOne), and returns the index of the
-- last one.
local function manyOp(KEYS, i, t, lim, cost, out, n)
  if t == '-1' and manyNow then
    now = manyNow
  else
    clock(t)
    if t == '-1' then
      manyNow = now
    end
  end
  return decideOne(KEYS, i, lim, cost, nil, out, n, true)
end

local function decideMany(KEYS, ARGV)
  local out, n = {}, 0
  manyNow = nil
  for i = 1, #KEYS / KEYS_PER_OP do
    local b = DECIDE1_ARGS * (i - 1)
    local ok, m = pcall(manyOp, KEYS, i, ARGV[b + ARG1_NOW], ARGV[b + ARG1_LIMIT], ARGV[b + ARG1_COST], out, n)
    if ok then
      n = m
    else
      n = n + 1
      out[n] = -1
    end
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
    local fn, key, p, o1, o2, o3, o4, o5, o6, left = prepare(KEYS, i, lim)
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
      h = handover(KEYS, i, op.lim, op.cost, r, op.left, q, undo)
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
