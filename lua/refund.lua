-- refund: give back the units of earlier admissions, each exactly or not at
-- all (see docs/algorithms.md, "Refunds"). Its arguments and reply are laid
-- out in the table "The script protocol" of core/redisstore/protocol.go,
-- whose offsets decide.lua names. Per op, two keys: the state the admission
-- was made on (the key's own state, or, for an admission under an override,
-- the override's state: KEY_OVERRIDE_STATE of decide.lua) and the op's
-- override key; after the instant and the number of ops, REFUND_ARGS_PER_OP
-- arguments: the state to restore (-1: follow the lower usage), the limit
-- (as in decide.lua), the cost, the instant the admission was decided at
-- (the last integer of its outcome), what the caller knows of the decision:
-- -1 when it names the admission by its instant only (a response-based
-- refund), or, when it undoes a decision it has just received (an
-- all-or-nothing decision across identities), the decision's reset (for a
-- bucket, its debt right after the admission, in units), and the id of the
-- override the admission was made under (the last integer of its reply; 0:
-- none). To undo the admission of an undoable decide (decide.lua), after
-- is "u", the UNDO_LEN integers of that op's reply and the decision's
-- reset: the state is put back exactly as it was before the admission when
-- nothing has changed it since (see undo), and by the refund rule with that
-- reset otherwise.
--
-- An admission under an override is given back to the override's state,
-- under the override's limit (read from its key), only while that same
-- override is in force: once it has ended or been replaced (its state was
-- deleted with it), nothing is given back, so no unit ever reaches another
-- override's state or the key's own. The reply is, per op, the OUTCOME_LEN
-- integers of a peek after the refund, then 1 if the refund was made
-- (REFUND_REPLY integers), or REFUND_REPLY zeros when the override has gone.

local REFUND_KEYS_PER_OP, RKEY_STATE, RKEY_OVERRIDE = 2, 1, 2
local REFUND_ARGS_PER_OP, RARG_STATE, RARG_LIMIT, RARG_COST, RARG_AT, RARG_AFTER, RARG_OVERRIDE_ID = 6, 1, 2, 3, 4, 5, 6
local REFUND_REPLY = OUTCOME_LEN + 1

local refunds = {b = bucketRefund, f = fixedRefund, c = counterRefund, l = slidingLogRefund}

-- overridden returns the code, step function and parameters of the override
-- of op i if it is the one named id and still in force, else nil.
local function overridden(KEYS, i, id)
  local raw = call('GET', KEYS[REFUND_KEYS_PER_OP * (i - 1) + RKEY_OVERRIDE])
  if not raw then
    return nil
  end
  local o = overrideOf(raw)
  if o.kind ~= 'o' or o.untilUs <= now or o.id ~= id then
    return nil
  end
  return o.code, o.fn, o.p
end

-- undoString restores a string state key to the value v0 and expiry x0
-- (ms; v0 -1: no key) it had before a write, if it still holds what that
-- write left (v1, x1). It returns whether it did.
local function undoString(key, v0, x0, v1, x1)
  local raw = call('GET', key)
  if (raw and tonumber(raw) or -1) ~= v1 or call('PEXPIRETIME', key) ~= x1 then
    return false
  end
  if v0 < 0 then
    call('DEL', key)
  elseif x0 > 0 then
    call('SET', key, fmt(v0), 'PXAT', fmt(x0))
  else
    return false -- a key without expiry is none of ours
  end
  return true
end

-- undoLog takes back a log write (logSave, undoable: no stale entry was
-- dropped): the entry at instant at goes back from n to old units (-1: it
-- did not exist), the warning state from state to stored (-1: none), the
-- expiry from x1 to x0 (-2: the key did not exist), if the key still holds
-- what the write left. It returns whether it did.
local function undoLog(key, at, old, n, stored, state, x0, x1)
  local m = fmt(at) .. ':' .. fmt(n)
  local lv = call('ZSCORE', key, 'lv')
  if not call('ZSCORE', key, m) or not lv or -1 - tonumber(lv) ~= state or call('PEXPIRETIME', key) ~= x1 then
    return false
  end
  if x0 < 0 then
    call('DEL', key)
    return true
  end
  call('ZREM', key, m)
  if old >= 0 then
    call('ZADD', key, fmt(at), fmt(at) .. ':' .. fmt(old))
  end
  if stored >= 0 then
    call('ZADD', key, fmt(-1 - stored), 'lv')
  else
    call('ZREM', key, 'lv')
  end
  call('PEXPIREAT', key, fmt(x0))
  return true
end

-- undo reads the argument after of a refund: a number (see the top of this
-- file), or, to undo an undoable decide's admission, "u", the UNDO_LEN
-- integers of its reply and the decision's reset. It restores the state
-- the admission was made on when nothing has changed it since, exactly as
-- if the admission had never been, and returns nil; otherwise it returns
-- the reset, for the refund rule.
local function undo(key, after)
  if sub(after, 1, 1) ~= 'u' then
    return tonumber(after)
  end
  local f = {}
  for w in string.gmatch(sub(after, 2), '%S+') do
    f[#f + 1] = tonumber(w)
  end
  local kind = f[1]
  if kind == UNDO_STRING and undoString(key, f[2], f[3], f[4], f[5]) then
    return nil
  elseif kind == UNDO_LOG and undoLog(key, f[2], f[3], f[4], f[5], f[6], f[7], f[8]) then
    return nil
  end
  return f[UNDO_LEN + 1]
end

local function refund(KEYS, ARGV)
  clock(ARGV[ARG_NOW])
  local n = tonumber(ARGV[ARG_COUNT])
  local out = {}
  for i = 1, n do
    local base = ARGV_HEAD + (i - 1) * REFUND_ARGS_PER_OP
    local code, fn, p
    local id = ARGV[base + RARG_OVERRIDE_ID]
    if id == '0' then
      code, fn, p = limit(ARGV[base + RARG_LIMIT])
    else
      code, fn, p = overridden(KEYS, i, id)
    end
    if not code then
      for _ = 1, REFUND_REPLY do
        out[#out + 1] = 0
      end
    else
      local key = KEYS[REFUND_KEYS_PER_OP * (i - 1) + RKEY_STATE]
      local cost = tonumber(ARGV[base + RARG_COST])
      local after = cost > 0 and undo(key, ARGV[base + RARG_AFTER])
      if after then
        refunds[code](key, cost, p, tonumber(ARGV[base + RARG_STATE]), tonumber(ARGV[base + RARG_AT]), after)
      end
      local r = {fn(key, 0, p, false)}
      for j = 1, OUTCOME_LEN do
        out[#out + 1] = r[j]
      end
      out[#out + 1] = 1
    end
  end
  return out
end
