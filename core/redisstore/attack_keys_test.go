package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// oldBase is the previous release's key function (d5bdf55,
// core/redisstore/keys.go), which took the Limiter's joined
// "identity\x00policy" (or a bare identity) and split it at its last NUL.
func oldBase(prefix, key string) string {
	id, policy := key, ""
	if i := strings.LastIndexByte(key, 0); i >= 0 {
		id, policy = key[:i], key[i+1:]
	}
	k := prefix + ":{" + tag(id) + "}:"
	if policy != "" {
		k += tag(policy) + ":"
	}
	return k
}

// The Redis keys of every state, override and override state are byte for
// byte the previous release's for the keys it was given: the Limiter's
// identity\x00policy (identities holding NULs, braces, '%', '#', long ones
// hashed, a policy of 200 and 201 bytes) and a bare identity, so an upgrade
// keeps every counter and override.
func TestAttackRedisKeysAsBefore(t *testing.T) {
	s := &Store{prefix: "sluice"}
	long := strings.Repeat("x", 201)
	ids := []string{"1.2.3.4", "a\x00b", "\x00", "a\x00", "{user}", "%7B", "#h", "}{", long, long[:200], "ü\x00{}"}
	policies := []string{"", "p", "login", "a{b}", long, long[:200], "p%#"}
	for _, id := range ids {
		for _, policy := range policies {
			joined := id
			if policy != "" {
				joined = id + "\x00" + policy
			} else if strings.IndexByte(id, 0) >= 0 {
				continue // a bare identity with a NUL was split by the old store: no Key has that meaning
			}
			k := core.Key{Identity: id, Policy: policy}
			old := oldBase("sluice", joined)
			for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter, core.GCRA} {
				require.Equal(t, old+algoCode[a], s.Key(k, a), "%q %q", id, policy)
				argv := s.opKeys(nil, k, a)
				require.Equal(t, []any{old + algoCode[a], old + "ovr", old + "ovr:s"}, argv, "%q %q", id, policy)
				require.Equal(t, []any{old + algoCode[a], old + "ovr"}, s.refundKeys(nil, k, a, 0))
				require.Equal(t, []any{old + "ovr:s", old + "ovr"}, s.refundKeys(nil, k, a, 7))
			}
		}
	}
}

// Two distinct Keys whose Policy holds a NUL can name one Redis state (see
// parts); a Take of both is an error, as a Take of two ops of one Key is,
// instead of deciding each against the state before the Take.
func TestAttackTakeOfKeysSharingRedisKeys(t *testing.T) {
	ctx := context.Background()
	s, err := New(redistest.StartServer(t).Client(t), WithTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	l := core.PerMinute(5)
	a, b := core.Key{Identity: "a\x00b", Policy: "c"}, core.Key{Identity: "a", Policy: "b\x00c"}
	require.Equal(t, s.Key(a, l.Algorithm), s.Key(b, l.Algorithm))
	err = s.Take(ctx, []core.Op{{Key: a, Limit: l, Cost: 3}, {Key: b, Limit: l, Cost: 3}}, make([]core.Result, 2))
	require.ErrorIs(t, err, core.ErrInvalidCost)
	require.ErrorContains(t, err, "op 0 has the same Redis keys")
	out := make([]core.Result, 1)
	require.NoError(t, s.Take(ctx, []core.Op{{Key: a, Limit: l, Cost: 5}}, out))
	require.True(t, out[0].Allowed, "the refused Take counted")
	require.NoError(t, s.Take(ctx, []core.Op{{Key: core.Key{Identity: "x", Policy: "p\x00q"}, Limit: l, Cost: 1}, {Key: core.Key{Identity: "x", Policy: "q"}, Limit: l, Cost: 1}}, make([]core.Result, 2)))
}

// A one-op call holds its keys itself: its argv (decide1's keys as
// pointers to them, which go-redis writes as the strings, then its
// arguments) costs one allocation, the keys' bytes, and names the keys
// opKeys names.
func TestDecide1ArgvAllocatesOnlyItsKeys(t *testing.T) {
	s := &Store{prefix: "sluice", r: &runner{}}
	cp, err := s.compile(core.PerSecond(10))
	require.NoError(t, err)
	op := &core.Op{Key: core.Key{Identity: "user:1", Policy: "per-user"}, Limit: core.PerSecond(10), Cost: 1}
	c := &call{}
	build := func() {
		c.argv = append(c.space[:0], nil, nil, keysPerOp)
		s.decide1Argv(c, cp, op)
	}
	build()
	var keys []string
	for _, k := range c.argv[argvFirstKey : argvFirstKey+keysPerOp] {
		keys = append(keys, *k.(*string))
	}
	want := s.opKeys(nil, op.Key, op.Limit.Algorithm)
	require.Equal(t, []any{keys[0], keys[1], keys[2]}, want)
	require.Equal(t, keys[0], c.firstKey())
	require.Equal(t, 1.0, testing.AllocsPerRun(100, build))
}
