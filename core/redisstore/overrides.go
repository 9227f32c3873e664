package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

// SetOverride replaces k's limit until o.Until, in Redis next to the key,
// so every instance sees it at its next decision; see core.Store.
func (s *Store) SetOverride(ctx context.Context, k core.Key, o core.Override) error {
	switch {
	case s.closed.Load():
		return fmt.Errorf("redisstore: SetOverride: %w", core.ErrClosed)
	case k.Identity == "":
		return fmt.Errorf("redisstore: SetOverride: Key.Identity: %w", core.ErrNoKey)
	}
	now := time.Now()
	if s.clock != nil {
		now = s.clock()
	}
	if err := core.ValidateOverride(o, now); err != nil {
		return fmt.Errorf("redisstore: SetOverride: %w", err)
	}
	until := o.Until.UnixMicro()
	val := "x " + strconv.FormatInt(until, 10)
	if !o.Blocks() {
		cp, err := s.compile(o.Limit)
		if err != nil {
			return fmt.Errorf("redisstore: SetOverride: Limit: %w", err)
		}
		// The id names this override among all the key ever has (a
		// refund finds its state by it, see lua/refund.lua): random, in
		// [1, 2^53) so that Lua reads it exactly.
		id := rand.Uint64N(1<<53-1) + 1
		val = "o " + strconv.FormatInt(until, 10) + " " + cp.limit + fmt.Sprintf(" %d %d %d %d %d", o.Limit.Algorithm, o.Limit.Rate, o.Limit.Period/time.Microsecond, o.Limit.Burst, id)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// The override counts on its own state, fresh for each override.
	ovr := s.overrideKey(k)
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetArgs(ctx, ovr, val, redis.SetArgs{ExpireAt: time.UnixMilli((until + 999) / 1000)})
		p.Del(ctx, ovr+":s")
		return nil
	})
	if err != nil {
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
		return fmt.Errorf("redisstore: ClearOverride: Key.Identity: %w", core.ErrNoKey)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Del(ctx, s.overrideKey(k)).Err(); err != nil {
		return fmt.Errorf("redisstore: ClearOverride: %w", err)
	}
	return nil
}
