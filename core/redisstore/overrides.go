package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/storekit"
)

// setOverride sets an override's value (KEYS[1]) unless the override
// already in force is the same, and then forgets the state of the one it
// replaces (KEYS[2]), atomically. ARGV[1] is the value without its id,
// ARGV[2] the id ("" for a block, whose value has none), ARGV[3] when the
// key expires (ms since the epoch). The value in force is the same when it
// is ARGV[1] followed by " " and any id (or ARGV[1] alone, for a block).
// It returns 1 when it set the override, 0 when it was in force already.
var setOverride = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local want = ARGV[1]
if cur then
  if cur == want then return 0 end
  local p = want .. ' '
  if ARGV[2] ~= '' and #cur > #p and string.sub(cur, 1, #p) == p and not string.find(cur, ' ', #p + 1, true) then
    return 0
  end
end
local val = want
if ARGV[2] ~= '' then val = want .. ' ' .. ARGV[2] end
redis.call('SET', KEYS[1], val)
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2])
return 1
`)

// SetOverride replaces k's limit until o.Until, in Redis next to the key,
// so every instance sees it at its next decision; see core.Store. Setting
// the override already in force for k (the same Limit and Until) changes
// nothing, atomically in one script: its state, and what it has counted,
// stay, however many instances set it.
func (s *Store) SetOverride(ctx context.Context, k core.Key, o core.Override) error {
	switch {
	case s.closed.Load():
		return fmt.Errorf("redisstore: SetOverride: %w", core.ErrClosed)
	case k.Identity == "":
		return fmt.Errorf("redisstore: SetOverride: %w", errNoIdentity)
	}
	now := time.Now()
	if s.clock != nil {
		now = s.clock()
	}
	if err := storekit.ValidateOverride(o, now); err != nil {
		return fmt.Errorf("redisstore: SetOverride: %w", err)
	}
	until := o.Until.UnixMicro()
	val, id := "x "+strconv.FormatInt(until, 10), ""
	if !o.Blocks() {
		cp, err := s.compile(o.Limit)
		if err != nil {
			return fmt.Errorf("redisstore: SetOverride: %w", storekit.FieldIn("Limit", err))
		}
		// The id names this override among all the key ever has (a
		// refund finds its state by it, see lua/refund.lua): random, in
		// [1, 2^53) so that Lua reads it exactly.
		id = strconv.FormatUint(rand.Uint64N(1<<53-1)+1, 10)
		val = "o " + strconv.FormatInt(until, 10) + " " + cp.limit + fmt.Sprintf(" %d %d %d %d", o.Limit.Algorithm, o.Limit.Rate, o.Limit.Period/time.Microsecond, o.Limit.Burst)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// A new override counts on its own state, fresh for each override.
	ovr := s.overrideKey(k)
	if err := setOverride.Run(ctx, s.client, []string{ovr, ovr + ":s"}, val, id, (until+999)/1000).Err(); err != nil {
		return fmt.Errorf("redisstore: SetOverride: %w", err)
	}
	return nil
}

// ClearOverride removes k's override.
func (s *Store) ClearOverride(ctx context.Context, k core.Key) error {
	switch {
	case s.closed.Load():
		return fmt.Errorf("redisstore: ClearOverride: %w", core.ErrClosed)
	case k.Identity == "":
		return fmt.Errorf("redisstore: ClearOverride: %w", errNoIdentity)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Del(ctx, s.overrideKey(k)).Err(); err != nil {
		return fmt.Errorf("redisstore: ClearOverride: %w", err)
	}
	return nil
}
