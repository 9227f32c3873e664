-- Fixed window and sliding window counter (core/algo/window.go).

-- Fixed window, on windows aligned to multiples of the period.
-- Params: Period (µs), Rate, WarnAbove, ClearBelow. Value payload:
-- off*2^40 + count (counts are below core.MaxRate < 2^40); the expiry is the
-- end of the count's window.
local FW_RADIX = 1099511627776

-- fixedLoad returns the end of the window the request counts in (the
-- stored one if the clock stepped back), its count and warning state, and
-- whether the key holds that window (so that a write of it keeps the
-- key's expiry and offset: see fixedWrite).
local function fixedLoad(key, P, rate)
  local x, inner, state = load(key)
  local expire, count = 0, 0
  if x > 0 then
    count = inner % FW_RADIX -- exact, FW_RADIX being a power of two
    expire = x * 1000 - (inner - count) / FW_RADIX
  end
  local wend = (idiv(now, P) + 1) * P
  if expire > wend then
    wend = expire -- the clock stepped back: keep the newer window
  elseif expire < wend then
    count, state = 0, 0 -- the stored window is over
  end
  return wend, count, state, expire == wend
end

local function fixedSave(key, rate, wend, count, state)
  if count == 0 then
    call('DEL', key)
    return
  end
  save(key, wend, FW_RADIX, count, state)
end

-- fixedWrite writes count and state of the window ending at wend, where
-- the key held count0 and state0 (held: of that window, see fixedLoad):
-- in one INCRBY of the difference when the window is the stored one, as
-- fixedSave would write it.
local function fixedWrite(key, rate, wend, count, state, held, count0, state0)
  if held and count > 0 then
    bump(key, (count - count0) * 4 + state - state0)
  else
    fixedSave(key, rate, wend, count, state)
  end
end

-- fixed decides one op (see bucket in bucket.lua for what every step
-- function takes and returns). It runs on every decision, so it makes
-- fixedLoad's read, the idiv of the window, nextState and the maxes in
-- line (the same arithmetic, with no function call, which costs the Lua
-- interpreter more than the arithmetic), and idiv by Lua's %, exact here
-- once its result is brought into [0, P).
local function fixed(key, cost, p, apply)
  local P, rate, warn, clear = p[1], p[2], p[3], p[4]
  local count, prevState, expire = 0, 0, 0
  local raw = call('GET', key)
  if raw then
    local v = tonumber(raw)
    prevState = v % 4
    local x = call('PEXPIRETIME', key)
    if x > 0 then
      local inner = (v - prevState) / 4
      count = inner % FW_RADIX
      expire = x * 1000 - (inner - count) / FW_RADIX
    end
  end
  local r = now % P
  if r < 0 then
    r = r + P
  elseif r >= P then
    r = r - P
  end
  local wend = now - r + P
  local held = true -- the key holds the window ending at wend
  if expire > wend then
    wend = expire -- the clock stepped back: keep the newer window
  elseif expire < wend then
    count, prevState, held = 0, 0, false -- the stored window is over
  end
  local at = wend - P
  if at < now then
    at = now
  end
  if cost > rate then
    local reset, rem = 0, rate - count
    if count > 0 then
      reset = wend - now
    end
    if rem < 0 then
      rem = 0
    end
    return 0, rem, -1, reset, 2, prevState, at
  end
  local need = cost
  if need < 1 then
    need = 1
  end
  local allowed, c2, retry, state = 1, count, 0, 0
  if count + need <= rate then
    if cost > 0 then
      c2 = count + cost
    end
    if prevState == 0 then
      if c2 > warn then
        state = 1
      end
    elseif c2 >= clear then
      state = 1
    end
  else
    allowed, retry, state = 0, wend - now, 2
  end
  local reset = 0
  if c2 > 0 then
    reset = wend - now
  end
  local write = nil
  if cost > 0 and (c2 ~= count or state ~= prevState) then
    if not apply then
      write = function() fixedWrite(key, rate, wend, c2, state, held, count, prevState) end
    elseif held and c2 > 0 then
      local d = (c2 - count) * 4 + state - prevState -- bump's INCRBY
      call('INCRBY', key, small[d] or fmt(d))
    else
      fixedSave(key, rate, wend, c2, state)
    end
  end
  local rem = rate - c2
  if rem < 0 then
    rem = 0
  end
  return allowed, rem, retry, reset, state, prevState, at, write
end

-- fixedRefund takes cost from the count if at is in the key's current
-- window (the stored one, if the clock stepped back behind it).
local function fixedRefund(key, cost, p, restore, at, after)
  local P, rate, warn, clear = p[1], p[2], p[3], p[4]
  local wend, count, prevState = fixedLoad(key, P, rate)
  if count == 0 or at < 0 or (idiv(at, P) + 1) * P ~= wend then
    return -- not an admission of this window
  end
  local c2 = max(count - cost, 0)
  if restore < 0 then
    restore = nextState(prevState, true, c2, warn, clear)
  end
  fixedSave(key, rate, wend, c2, restore)
end

-- Sliding window counter, Cloudflare's two-window estimate.
-- Params: Period (µs), Rate, Full (Rate*Period), WarnAbove, ClearBelow.
-- Value payload: (off*M + prev)*M + cur with M = 2^20+1 (counts are at most
-- core.MaxCounterRate = 2^20); the expiry is (w+2)*Period, w the window of
-- cur.
local SWC_RADIX = 1048577
local SWC_RADIX2 = SWC_RADIX * SWC_RADIX

-- counterLoad returns the window w the request falls in (the stored one if
-- the clock stepped back), the counts p and c as seen from w, the warning
-- state, and whether the key holds them as they are (its window is w: a
-- write of w keeps its expiry and offset, see counterWrite).
local function counterLoad(key, P, rate)
  local M = SWC_RADIX
  local x, inner, state = load(key)
  local w = idiv(now, P)
  if x == 0 then
    return w, 0, 0, 0
  end
  local sc = imod(inner, M)
  local rest = (inner - sc) / M
  local sp = imod(rest, M)
  local expire = x * 1000 - (rest - sp) / M
  local sw = expire / P - 2
  if sw >= w then
    return sw, sp, sc, state, true
  elseif sw == w - 1 and sc > 0 then
    return w, sc, 0, state
  end
  return w, 0, 0, 0
end

local function counterSave(key, P, rate, w, p, c, state)
  if p == 0 and c == 0 then
    call('DEL', key)
    return
  end
  save(key, (w + 2) * P, SWC_RADIX2, p * SWC_RADIX + c, state)
end

-- counterWrite writes the counts p and c and the warning state of window
-- w, where the key held c0 and state0 (held: of w, see counterLoad), in one
-- INCRBY of the difference when it did, as counterSave would write them.
local function counterWrite(key, P, rate, w, p, c, state, held, c0, state0)
  if held and (p > 0 or c > 0) then
    bump(key, (c - c0) * 4 + state - state0)
  else
    counterSave(key, P, rate, w, p, c, state)
  end
end

-- counterReset is the time until the counts p and c are all gone, e into
-- their window (skew ahead of now when the clock stepped back).
local function counterReset(p, c, P, e, skew)
  if c > 0 then return skew + 2 * P - e end
  if p > 0 then return skew + P - e end
  return 0
end

-- counter decides one op, with counterLoad's read, the idivs, nextState
-- and counterReset in line, as fixed makes them.
local function counter(key, cost, p_, apply)
  local P, rate, full, warn, clear = p_[1], p_[2], p_[3], p_[4], p_[5]
  local M = SWC_RADIX
  local r = now % P
  if r < 0 then
    r = r + P
  elseif r >= P then
    r = r - P
  end
  local w = (now - r) / P -- exact: a multiple of P
  local p, c, prevState, held = 0, 0, 0, false
  local raw = call('GET', key)
  if raw then
    local v = tonumber(raw)
    local state = v % 4
    local x = call('PEXPIRETIME', key)
    local inner = (v - state) / 4
    local sc = inner % M
    if sc < 0 then
      sc = sc + M
    elseif sc >= M then
      sc = sc - M
    end
    local rest = (inner - sc) / M
    local sp = rest % M
    if sp < 0 then
      sp = sp + M
    elseif sp >= M then
      sp = sp - M
    end
    local sw = (x * 1000 - (rest - sp) / M) / P - 2
    if sw >= w then
      w, p, c, prevState, held = sw, sp, sc, state, true
    elseif sw == w - 1 and sc > 0 then
      p, prevState = sc, state
    end
  end
  local start = w * P
  local e, skew = now - start, 0
  if e < 0 then
    e, skew = 0, -e
  end
  local used = p * (P - e) + c * P
  if cost > rate then
    return 0, idiv(max(full - used, 0), P), -1, counterReset(p, c, P, e, skew), 2, prevState, now + skew
  end
  local need = cost
  if need < 1 then
    need = 1
  end
  local allowed, c2, used2, retry, state = 1, c, used, 0, 0
  if used + need * P <= full then
    if cost > 0 then
      c2, used2 = c + cost, used + cost * P
    end
    if prevState == 0 then
      if used2 > warn then
        state = 1
      end
    elseif used2 >= clear then
      state = 1
    end
  else
    allowed, state = 0, 2
    if c + need <= rate then
      retry = skew + P - e - idiv((rate - c - need) * P, p)
    else
      retry = skew + 2 * P - e - idiv((rate - need) * P, c)
    end
  end
  local write = nil
  if cost > 0 and (c2 ~= c or state ~= prevState) then
    if not apply then
      write = function() counterWrite(key, P, rate, w, p, c2, state, held, c, prevState) end
    elseif held and (p > 0 or c2 > 0) then
      local d = (c2 - c) * 4 + state - prevState -- bump's INCRBY
      call('INCRBY', key, small[d] or fmt(d))
    else
      counterSave(key, P, rate, w, p, c2, state)
    end
  end
  local reset = 0
  if c2 > 0 then
    reset = skew + 2 * P - e
  elseif p > 0 then
    reset = skew + P - e
  end
  local f = full - used2
  if f < 0 then
    f = 0
  end
  local fr = f % P
  if fr < 0 then
    fr = fr + P
  elseif fr >= P then
    fr = fr - P
  end
  return allowed, (f - fr) / P, retry, reset, state, prevState, now + skew, write
end

-- counterRefund takes cost from the count of the window at fell in, the
-- current one or the previous one; an older admission no longer counts.
local function counterRefund(key, cost, p_, restore, at, after)
  local P, rate, warn, clear = p_[1], p_[2], p_[4], p_[5]
  local w, p, c, prevState = counterLoad(key, P, rate)
  if at < 0 or (p == 0 and c == 0) then
    return
  end
  local aw = idiv(at, P)
  if aw == w then
    c = c - min(c, cost)
  elseif aw == w - 1 then
    p = p - min(p, cost)
  else
    return
  end
  local e = max(now - w * P, 0)
  if restore < 0 then
    restore = nextState(prevState, true, p * (P - e) + c * P, warn, clear)
  end
  counterSave(key, P, rate, w, p, c, restore)
end
