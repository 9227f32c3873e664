package redisstore

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/core"
)

// opKeys appends the three keys of one op of lua/decide.lua, for the key
// split into identity and policy: its state, its override, and its state
// while an override limit applies. They share one allocation: the
// override's key is a prefix of the third.
func (s *Store) opKeys(argv []any, id, policy string, a core.Algorithm) []any {
	id, policy = tag(id), tag(policy)
	code := algoCode[a]
	n := len(s.prefix) + len(":{") + len(id) + len("}:")
	if policy != "" {
		n += len(policy) + len(":")
	}
	var b strings.Builder
	b.Grow(2*n + len(code) + len("ovr:s"))
	for _, end := range [2]string{code, "ovr:s"} {
		b.WriteString(s.prefix)
		b.WriteString(":{")
		b.WriteString(id)
		b.WriteString("}:")
		if policy != "" {
			b.WriteString(policy)
			b.WriteByte(':')
		}
		b.WriteString(end)
	}
	all := b.String()
	state, ovrState := all[:n+len(code)], all[n+len(code):]
	return append(argv, state, ovrState[:len(ovrState)-len(":s")], ovrState)
}

// refundKeys appends KEYS of a refund of one op of key (lua/refund.lua):
// the state the admission was made on (key's own under algorithm a, or,
// with an override id, the override's), then key's override.
func (s *Store) refundKeys(args []any, key string, a core.Algorithm, ovID uint64) []any {
	ovr := s.overrideKey(key)
	if ovID != 0 {
		return append(args, ovr+":s", ovr)
	}
	return append(args, s.Key(key, a), ovr)
}

// overrideKey is the Redis key of key's override, in the identity's slot.
func (s *Store) overrideKey(key string) string {
	return s.base(key) + "ovr"
}

// split returns the identity of a key (what goes in the hash tag) and its
// policy: keys are identity + "\x00" + policy, or all identity.
func split(key string) (id, policy string) {
	if i := strings.LastIndexByte(key, 0); i >= 0 {
		return key[:i], key[i+1:]
	}
	return key, ""
}

// base returns "<prefix>:{identity}:" plus "policy:" when there is one.
func (s *Store) base(key string) string {
	id, policy := split(key)
	k := s.prefix + ":{" + tag(id) + "}:"
	if policy != "" {
		k += tag(policy) + ":"
	}
	return k
}

// maxRawKey is the longest key stored as is; longer keys are hashed.
const maxRawKey = 200

var algoCode = [...]string{core.TokenBucket: "tb", core.LeakyBucket: "lb", core.FixedWindow: "fw", core.SlidingWindowLog: "sl", core.SlidingWindowCounter: "sc", core.GCRA: "gc"}

// Key returns the Redis key that holds key's state under algorithm a. A key
// "identity\x00policy", as the Limiter builds them, becomes
// "<prefix>:{identity}:policy:<algorithm>": only the identity is in the hash
// tag, so every policy of one identity shares a Cluster slot.
func (s *Store) Key(key string, a core.Algorithm) string {
	return s.base(key) + algoCode[a]
}

// tag makes key safe inside a hash tag: braces and "%" percent-escaped, and a
// key longer than maxRawKey replaced by "#" and its SHA-256.
func tag(key string) string {
	if len(key) > maxRawKey {
		sum := sha256.Sum256([]byte(key))
		return "#" + base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	if !strings.ContainsAny(key, "{}%#") {
		return key
	}
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '{', '}', '%', '#':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
