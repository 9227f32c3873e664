package redisstore

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
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
