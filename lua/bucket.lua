-- Token bucket, leaky bucket and GCRA: one meter (core/algo/bucket.go).
-- Params: Q, T, Full, Capacity, WarnAbove, ClearBelow.
-- Value payload: off + 1000*V, where the TAT in units is expire*Q - V (the
-- payload does not depend on the limit, so a key keeps its meaning when its
-- limit changes).

local function bucketLoad(key, Q)
  local x, inner, state = load(key)
  local expire, v = 0, 0
  if x > 0 then
    local off = imod(inner, 1000)
    v = (inner - off) / 1000
    expire = x * 1000 - off
  end
  if expire <= now then
    return 0, 0, 0, 0
  end
  return min(expire - now, idiv(MAXEXACT, Q)) * Q - v, expire, v, state
end

local function bucketSave(key, Q, d, state)
  if d <= 0 then
    call('DEL', key)
    return
  end
  local units = idiv(d + Q - 1, Q)
  local v = units * Q - d
  save(key, now + units, 1, 1000 * v, state)
end

-- beyondWait is the wait in µs until need units fit in a bucket past the
-- clamp, whose TAT is gap µs ahead less v units (Spec.beyondWait): the
-- earliest whole r with (gap - r)*Q - v <= full - need, and no earlier
-- than the gap is back within the clamp; the sum is split to stay exact.
local function beyondWait(gap, need, v, full, Q)
  local room = full - need
  return max(gap - (idiv(room, Q) + idiv(imod(room, Q) + v, Q)), gap - idiv(MAXEXACT, Q))
end

-- bucket decides one op. It returns the seven values of the reply (the
-- last is the instant decided at), then, unless apply is set, the write to
-- make if the op is applied (a function; nil when nothing would change).
-- With apply set it makes that write itself. Every algorithm's function
-- returns the same.
--
-- book is the longest booking allowed in µs (nil or 0: none), clamped as
-- Spec.Book clamps it (core/algo/book.go): a booking is the take made at
-- the slot, the earliest whole µs at which the cost fits, if that is at most
-- book µs away; the TAT becomes max(TAT, slot*Q) + cost*T, the reply's retry
-- is the wait until the slot (in units) and its instant the slot. The window
-- functions take no book: a window never books.
--
-- A key past the clamp (its gap expire - now beyond MAXEXACT/Q: a clock
-- stepped back by more than 2^53 units) is denied whatever the cost, with
-- exact waits in µs, encoded as -2 - µs (algo.Micros): the gap until full
-- again, and beyondWait until the cost fits.
local function bucket(key, cost, p, apply, book)
  local Q, T, full, cap, warn, clear = p[1], p[2], p[3], p[4], p[5], p[6]
  -- the clamp idiv(MAXEXACT, Q), made once per parameters
  local clamp = p[7]
  if not clamp then
    clamp = idiv(MAXEXACT, Q)
    p[7] = clamp
  end
  -- bucketLoad, in line: the debt d, the expiry, v, the warning state
  local d, expire, v, prevState = 0, 0, 0, 0
  local raw = call('GET', key)
  if raw then
    local n = tonumber(raw)
    local state = n % 4
    local x = call('PEXPIRETIME', key)
    if x > 0 then
      local inner = (n - state) / 4
      local off = inner % 1000
      if off < 0 then
        off = off + 1000
      elseif off >= 1000 then
        off = off - 1000
      end
      expire = x * 1000 - off
      if expire > now then
        v = (inner - off) / 1000
        local gap = expire - now
        if gap > clamp then
          gap = clamp
        end
        d, prevState = gap * Q - v, state
      else
        expire = 0
      end
    end
  end
  local beyond = expire - now > clamp
  local reset = d
  if beyond then
    reset = -2 - (expire - now)
  end
  if cost > cap then
    return 0, idiv(max(full - d, 0), T), -1, reset, 2, prevState, now
  end
  book = book or 0
  if book > 0 then
    book = max(min(book, idiv(MAXEXACT - full, Q) - 1), 0)
  end
  local need = cost
  if need < 1 then
    need = 1
  end
  need = need * T
  -- > 0: the units until the cost fits (d - full first: d + need may pass
  -- 2^53 after a large backward step, where a double is no longer exact)
  local over = d - full + need
  local delay = 0 -- µs from now to the booked slot
  if over > 0 and book > 0 then
    delay = idiv(over + Q - 1, Q)
  end
  -- a state beyond the clamp of a large backward step is far beyond full
  local allowed = (over <= 0 or (book > 0 and delay <= book)) and not beyond
  local retry, d2, state = 0, d, 2
  if not allowed and beyond then
    retry, delay = -2 - beyondWait(expire - now, need, v, full, Q), 0
  elseif not allowed then
    retry, delay = over, 0
  else
    retry = delay * Q
    if cost > 0 then
      d2 = delay * Q
      if d2 < d then
        d2 = d
      end
      d2 = d2 + need
    end
    state = 0 -- nextState, in line
    if prevState == 0 then
      if d2 > warn then
        state = 1
      end
    elseif d2 >= clear then
      state = 1
    end
  end
  local write = nil
  if cost > 0 and d2 ~= d then
    if not apply then
      write = function() bucketSave(key, Q, d2, state) end
    elseif d2 <= 0 then
      call('DEL', key)
    else
      -- bucketSave and save, in line
      local s = d2 + Q - 1
      local r = s % Q
      if r < 0 then
        r = r + Q
      elseif r >= Q then
        r = r - Q
      end
      local units = (s - r) / Q
      local until_ = now + units
      local ms = until_ % 1000
      if ms < 0 then
        ms = ms + 1000
      elseif ms >= 1000 then
        ms = ms - 1000
      end
      local x = (until_ - ms) / 1000
      if ms > 0 then
        x = x + 1
      end
      call('SET', key, fmt((x * 1000 - until_ + 1000 * (units * Q - d2)) * 4 + state), 'PXAT', fmt(x))
    end
  elseif cost > 0 and state ~= prevState then
    -- only the warning state changes: the TAT is kept as stored, never rebuilt
    -- from a debt clamped after a backward step
    if apply then
      save(key, expire, 1, 1000 * v, state)
    else
      write = function() save(key, expire, 1, 1000 * v, state) end
    end
  end
  if not beyond then
    reset = d2
  end
  local rem = full - d2
  if rem < 0 then
    rem = 0
  end
  return allowed and 1 or 0, idiv(rem, T), retry, reset, state, prevState, now + delay, write
end

-- undrained returns x - el*Q, at least 0, without forming a product that
-- could leave the exact range.
local function undrained(x, el, Q)
  if el <= 0 then
    return x
  end
  if el >= idiv(x + Q - 1, Q) then
    return 0
  end
  return x - el * Q
end

-- bucketRefund undoes the admission of cost units decided at instant at
-- (core/algo/refund.go): the TAT moves back by the part of it not yet
-- drained, cost*T - (t - at)*Q clamped to [0, cost*T], never below now, where
-- t = max(now, at, TAT - Full). When the caller has just received the
-- decision (after >= 0: the debt it left, in units), the TAT that admission
-- left minus t is a bound too (every later admission was made by t and added
-- to the TAT), and the larger of the two is given back, at most cost*T: an
-- admission made behind a deep debt has drained nothing yet. The warning state
-- becomes restore, or follows the lower usage when restore is -1.
local function bucketRefund(key, cost, p, restore, at, after)
  local Q, T, full, cap, warn, clear = p[1], p[2], p[3], p[4], p[5], p[6]
  local d, expire, v, prevState = bucketLoad(key, Q)
  if d == 0 or expire - now > idiv(MAXEXACT, Q) then
    return
  end
  local el = max(now, at) - at
  if d > full then -- the clock stepped back behind the last admission
    el = max(el, now + idiv(d - full + Q - 1, Q) - at)
  end
  local whole = min(cost, cap) * T
  local r = undrained(whole, el, Q)
  if after and after >= 0 then
    r = max(r, min(whole, undrained(after, el, Q)))
  end
  if r == 0 then
    return -- drained
  end
  local d2 = max(d - r, 0)
  if restore < 0 then
    restore = nextState(prevState, true, d2, warn, clear)
  end
  bucketSave(key, Q, d2, restore)
end
