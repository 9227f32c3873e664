-- Shared prelude of sluice's scripts (prepended by lua.go).
--
-- The entry points (decide.lua, refund.lua) are functions of (KEYS, ARGV),
-- run either as a Redis Function of one library (defined once, at FUNCTION
-- LOAD) or from a script that defines everything and calls one of them (EVAL,
-- where every definition is made again on each call). No state of the
-- limits is kept from one call to the next (now is set at the start of each
-- call); what is kept (builtins bound below, parsed limits in decide.lua) is
-- the same whatever the calls.
--
-- A call decides one or more ops atomically. ARGV[1] is the instant in µs,
-- or -1 to read Redis TIME (the default: one clock for every instance). Every
-- key a call touches is in KEYS, except the override state of an op of
-- decideMany, which runs on a standalone server only (see decide.lua). The limit of each op is compiled in Go by
-- core/algo and passed as integers, so both stores share one definition:
-- one argument holds an algorithm's code and its six parameters, separated
-- by spaces (see limit in decide.lua).
--
-- Numbers are Lua doubles: every value is an integer below 2^53 (checked by
-- core.Limit.Validate), and idiv/imod below are exact where a plain division
-- could round.
--
-- State lives in a key's expiry and one integer value. The expiry is the
-- instant the key is fresh again, rounded up to the ms (PXAT); the value holds
-- the sub-ms offset off = expiry_ms*1000 - expire_us, the algorithm's counts,
-- and the warning state in its two low bits. Small values use Redis's shared
-- integers, so most keys cost no value object at all.
--
-- What a call costs Redis is mostly its redis.call()s (each converts its
-- arguments and its reply), the strtod of tonumber and the sprintf of
-- string.format, more than the arithmetic: so a value that stays in place
-- is changed by INCRBY rather than rewritten with its expiry (bump), and
-- the conversions of values that repeat (costs, the seconds of TIME, small
-- integers, limits, overrides) are made once and kept. See docs/redis.md,
-- "What a decision costs Redis", and BenchmarkRedisCost.

-- Redis lets a library use math, string and redis.call only while one of
-- its functions runs, not while it loads, so the ones used on every call are
-- bound to locals (quicker than a lookup in the globals each time) by bind,
-- at the start of the first call (of every call, for a script).
local floor, max, min, format, byte, find, sub, call

local function bind()
  floor, max, min = math.floor, math.max, math.min
  format, byte, find, sub = string.format, string.byte, string.find, string.sub
  call = redis.call
end

local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function imod(a, b)
  return a - idiv(a, b) * b
end

-- fmt returns the decimal digits of the integer n (string.format, which
-- is exact below 2^53 where tostring is not). Small values, the deltas of
-- bump among them, are formatted once and kept.
local small = {}
local function fmt(n)
  local s = small[n]
  if s then
    return s
  end
  s = format('%d', n)
  if n > -1024 and n < 1024 then
    small[n] = s
  end
  return s
end

-- num returns the number an argument holds, for arguments that take few
-- distinct values (a cost): tonumber (a strtod) runs once per value, and
-- at most 1024 are kept.
local nums, nnums = {}, 0
local function num(s)
  local n = nums[s]
  if not n then
    n = tonumber(s)
    if nnums >= 1024 then
      nums, nnums = {}, 0
    end
    nums[s], nnums = n, nnums + 1
  end
  return n
end

local MAXEXACT = 9007199254740992

-- now is the instant of the current call, in µs (see clock).
local now = 0

-- undoable is set while decide decides a part of a group that another
-- script may have to undo (see decide.lua): the log then keeps its stale
-- entries (they may count again once the admission is undone), and
-- logWrote records what its write changed.
local undoable, logWrote = false, nil

-- The seconds of the last TIME read, as TIME gives them and in µs: they
-- change once a second, so their conversion is made once a second.
local secs, secsUs = nil, 0

-- clock sets now from ARGV[1]: the caller's instant, or Redis TIME when it
-- is negative ("-1" by default).
local function clock(arg)
  if not call then
    bind()
  end
  if arg ~= '-1' then
    now = tonumber(arg)
  end
  if arg == '-1' or now < 0 then
    local t = call('TIME')
    if t[1] ~= secs then
      secs, secsUs = t[1], tonumber(t[1]) * 1000000
    end
    now = secsUs + tonumber(t[2])
  end
end

-- nextState is the warning-state machine of core/algo (Spec.nextState):
-- the warning state after a decision, from the state before it (prev).
local function nextState(prev, allowed, used, warn, clear)
  if not allowed then
    return 2
  end
  if prev == 0 then
    if used > warn then return 1 end
    return 0
  end
  if used < clear then return 0 end
  return 1
end

-- load returns a key's expiry in ms (0 for a fresh key), its value without
-- the warning state, and the warning state.
local function load(key)
  local raw = call('GET', key)
  if not raw then
    return 0, 0, 0
  end
  local n = tonumber(raw)
  local state = n % 4 -- exact: a division by a power of two rounds nothing
  return call('PEXPIRETIME', key), (n - state) / 4, state
end

local function expiryMs(expire)
  local x = idiv(expire, 1000)
  if x * 1000 < expire then
    x = x + 1
  end
  return x
end

-- bump adds delta to a key's value, keeping its expiry: the write of a
-- state whose expiry and sub-ms offset stay as stored (a window's count, or
-- only its warning state, changing), as save would write it, in one INCRBY.
local function bump(key, delta)
  if delta ~= 0 then
    call('INCRBY', key, fmt(delta))
  end
end

-- save writes a non-fresh state: expire (µs), the value's payload
-- off*scale + add (off is the sub-ms rest of expire), and the warning state. A fresh
-- state deletes the key.
local function save(key, expire, scale, add, state)
  if expire == 0 then
    call('DEL', key)
    return
  end
  local x = expiryMs(expire)
  call('SET', key, fmt(((x * 1000 - expire) * scale + add) * 4 + state), 'PXAT', fmt(x))
end
