-- Sliding window log, exact (core/algo/log.go). Params: Period (µs), Rate,
-- WarnAbove, ClearBelow.
-- The key is a sorted set: one member "<at>:<n>" per admission instant, scored
-- by the instant, and the member "lv" scored -1-state (the warning state). The key expires when
-- its newest entry leaves the window. Cost: O(entries in the window), at most
-- Rate (capped by core.MaxLogRate).

-- entryAt and entryN read the instant and the count of a member
-- "<at>:<n>".
local function entryAt(m)
  return tonumber(sub(m, 1, find(m, ':', 1, true) - 1))
end

local function entryN(m)
  local colon, one = byte(m, -2, -1)
  if colon == 58 and one == 49 then -- ":1", the usual count
    return 1
  end
  return tonumber(sub(m, find(m, ':', 1, true) + 1))
end

-- logLoad returns the decision instant (the newest entry's if the clock
-- stepped back), the members and the index of the first live entry (the
-- live ones are members[first..#members], oldest first), their total, the
-- warning state, and what logSave needs to skip writes that change nothing: the
-- number of entries that left the window (they stay until the next write)
-- and the warning state stored (nil if none).
-- One ZRANGE reads every member ("lv" first: its score is negative), without
-- scores (formatting them is most of the cost of a ZRANGE, and a member
-- holds its instant); counts are parsed only where they are not 1.
local function logLoad(key, P)
  local members = call('ZRANGE', key, 0, -1)
  local first, stored = 1, nil
  if members[1] == 'lv' then
    stored = -1 - tonumber(call('ZSCORE', key, 'lv'))
    first = 2
  end
  local k = #members
  local at = now
  if k >= first then
    local newest = entryAt(members[k])
    if newest > at then
      at = newest
    end
  end
  -- entries are sorted by instant, and those that left the window are
  -- few: each write removes them
  local from = at - P
  local live = first
  while live <= k and entryAt(members[live]) <= from do
    live = live + 1
  end
  local total = 0
  for i = live, k do
    total = total + entryN(members[i])
  end
  local state = stored or 0
  if total == 0 then -- nothing counts: a fresh key (an emptied entry may remain)
    state = 0
  end
  return at, members, live, total, state, live - first, stored
end

-- logSave prunes what can never count again and writes the entries'
-- changes: the entry at instant entryAt now counts n (0: removed), old is
-- its previous count (nil: there was none; 0: an emptied newest entry), and
-- last is the newest instant left (nil: none). An
-- entry leaves for good only once it is a Period older than the newest
-- (core/algo/log.go): a decision is never made behind the newest entry, but
-- after a backward step it can be made behind at. stale and stored are
-- logLoad's.
local function logSave(key, P, at, last, state, entryAt, old, n, stale, stored)
  if undoable then
    -- what undoLog needs to take this write back: the entry, its counts
    -- before and after, the warning state before and after
    logWrote = {entryAt, old or -1, n, stored or -1, state}
  end
  if stale > 0 and last and not undoable then
    call('ZREMRANGEBYSCORE', key, 0, fmt(last - P))
  end
  if old then
    call('ZREM', key, fmt(entryAt) .. ':' .. fmt(old))
  end
  if not last then
    call('DEL', key)
    return
  end
  -- the new entry and the warning state in one ZADD; the warning state only if it changed
  if n > 0 and stored ~= state then
    call('ZADD', key, fmt(entryAt), fmt(entryAt) .. ':' .. fmt(n), fmt(-1 - state), 'lv')
  elseif n > 0 then
    call('ZADD', key, fmt(entryAt), fmt(entryAt) .. ':' .. fmt(n))
  elseif stored ~= state then
    call('ZADD', key, fmt(-1 - state), 'lv')
  end
  call('PEXPIREAT', key, fmt(expiryMs(last + P)))
end

local function slidingLog(key, cost, p, apply)
  local P, rate, warn, clear = p[1], p[2], p[3], p[4]
  local at, members, live, total, prevState, stale, stored = logLoad(key, P)
  local k = #members
  local skew = at - now
  local last, reset = nil, 0
  if live <= k then
    last = entryAt(members[k])
    for i = k, live, -1 do
      if entryN(members[i]) > 0 then -- the newest entry that counts
        reset = entryAt(members[i]) + P - now
        break
      end
    end
  end
  if cost > rate then
    return 0, max(rate - total, 0), -1, reset, 2, prevState, at
  end
  local need = max(cost, 1)
  local allowed = total + need <= rate
  local retry = 0
  if not allowed then
    local freed = 0
    for i = live, k do
      freed = freed + entryN(members[i])
      if total - freed + need <= rate then
        retry = entryAt(members[i]) + P - at + skew
        break
      end
    end
  end
  local old, n = nil, 0
  local total2 = total
  if allowed and cost > 0 then
    if last == at then
      old = entryN(members[k])
    end
    n = (old or 0) + cost
    last = at
    total2 = total + cost
    reset = at + P - now
  end
  local state = nextState(prevState, allowed, total2, warn, clear)
  local write = nil
  if cost > 0 then
    if apply then
      logSave(key, P, at, last, state, at, old, n, stale, stored)
    else
      write = function() logSave(key, P, at, last, state, at, old, n, stale, stored) end
    end
  end
  return allowed and 1 or 0, max(rate - total2, 0), retry, reset, state, prevState, at, write
end

-- slidingLogRefund takes cost units from the entry at instant at, if it
-- is still in the window; from no other (core/algo/refund.go). The newest
-- entry stays, even emptied ("<at>:0"), while others count: it is the
-- instant the key records (it counts nothing and changes no reply).
local function slidingLogRefund(key, cost, p, restore, at, after)
  local P, rate, warn, clear = p[1], p[2], p[3], p[4]
  local t, members, live, total, prevState, stale, stored = logLoad(key, P)
  local k = #members
  local idx = nil
  for i = k, live, -1 do
    local ti = entryAt(members[i])
    if ti == at then
      idx = i
      break
    elseif ti < at then
      break
    end
  end
  if not idx then
    return -- gone, or never there
  end
  local old = entryN(members[idx])
  local take = min(cost, old)
  total = total - take
  if total == 0 then
    call('DEL', key) -- nothing counts any more: the key is fresh
    return
  end
  call('ZREM', key, members[idx])
  if old > take or idx == k then
    call('ZADD', key, fmt(at), fmt(at) .. ':' .. fmt(old - take))
  end
  if restore < 0 then
    restore = nextState(prevState, true, total, warn, clear)
  end
  logSave(key, P, t, entryAt(members[k]), restore, 0, nil, 0, stale, stored)
end
