-- Shared prelude of sluice's scripts (prepended by lua.go).
--
-- A script decides one or more ops atomically. ARGV[1] is the instant in µs,
-- or -1 to read Redis TIME (the default: one clock for every instance). Every
-- key a script touches is in KEYS. The limit of each op is compiled in Go by
-- core/algo and passed as integers, so both stores share one definition.
--
-- Numbers are Lua doubles: every value is an integer below 2^53 (checked by
-- core.Limit.Validate), and idiv/imod below are exact where a plain division
-- could round.
--
-- State lives in a key's expiry and one integer value. The expiry is the
-- instant the key is fresh again, rounded up to the ms (PXAT); the value holds
-- the sub-ms offset off = expiry_ms*1000 - expire_us, the algorithm's counts,
-- and the warning level in its two low bits. Small values use Redis's shared
-- integers, so most keys cost no value object at all.

local function idiv(a, b)
  local q = math.floor(a / b)
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

local function fmt(n)
  return string.format('%d', n)
end

local MAXEXACT = 9007199254740992

local now = tonumber(ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- level is the warning-state machine of core/algo (Spec.level).
local function level(prev, allowed, used, warn, clear)
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
-- the level, and the level.
local function load(key)
  local raw = redis.call('GET', key)
  if not raw then
    return 0, 0, 0
  end
  local n = tonumber(raw)
  local lv = imod(n, 4)
  return redis.call('PEXPIRETIME', key), (n - lv) / 4, lv
end

local function expiryMs(expire)
  local x = idiv(expire, 1000)
  if x * 1000 < expire then
    x = x + 1
  end
  return x
end

-- save writes a non-fresh state: expire (µs), the value's payload fn(off),
-- and the level. A fresh state deletes the key.
local function save(key, expire, payload, lv)
  if expire == 0 then
    redis.call('DEL', key)
    return
  end
  local x = expiryMs(expire)
  redis.call('SET', key, fmt(payload(x * 1000 - expire) * 4 + lv), 'PXAT', fmt(x))
end
