package redisstore

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/core"
)

// opKeys appends the three keys of one op of lua/decide.lua, for k: its
// state, its override, and its state while an override limit applies. They
// share one allocation: the override's key is a prefix of the third.
func (s *Store) opKeys(argv []any, k core.Key, a core.Algorithm) []any {
	var keys [keysPerOp]string
	s.keysOf(&keys, k, a)
	return append(argv, keys[0], keys[1], keys[2])
}

// keysOf sets keys to the KEYS of one op of k under algorithm a (see
// opKeys), in one allocation.
func (s *Store) keysOf(keys *[keysPerOp]string, k core.Key, a core.Algorithm) {
	id, policy := parts(k)
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
	keys[0], keys[1], keys[2] = state, ovrState[:len(ovrState)-len(":s")], ovrState
}

// refundKeys appends KEYS of a refund of one op of k (lua/refund.lua):
// the state the admission was made on (k's own under algorithm a, or, with
// an override id, the override's), then k's override.
func (s *Store) refundKeys(args []any, k core.Key, a core.Algorithm, ovID uint64) []any {
	b := s.base(k)
	ovr := b + "ovr" // overrideKey
	if ovID != 0 {
		return append(args, ovr+":s", ovr)
	}
	return append(args, b+algoCode[a], ovr) // Key
}

// overrideKey is the Redis key of k's override, in the identity's slot.
func (s *Store) overrideKey(k core.Key) string {
	return s.base(k) + "ovr"
}

// parts returns the identity and the policy the Redis keys of k are made
// of: k's own, unless the policy holds a NUL. Earlier versions took a
// joined "identity\x00policy" and split it at its last NUL, so a policy
// with a NUL is cut at its last one, the part before joining the identity
// (with the NUL), for the keys to stay the same. (The Limiter's policy
// names never hold one: this is for callers of the store.)
func parts(k core.Key) (id, policy string) {
	if i := strings.LastIndexByte(k.Policy, 0); i >= 0 {
		return k.Identity + "\x00" + k.Policy[:i], k.Policy[i+1:]
	}
	return k.Identity, k.Policy
}

// base returns "<prefix>:{identity}:" plus "policy:" when there is one.
func (s *Store) base(k core.Key) string {
	id, policy := parts(k)
	b := s.prefix + ":{" + tag(id) + "}:"
	if policy != "" {
		b += tag(policy) + ":"
	}
	return b
}

// maxRawKey is the longest key stored as is; longer keys are hashed.
const maxRawKey = 200

var algoCode = [...]string{core.TokenBucket: "tb", core.LeakyBucket: "lb", core.FixedWindow: "fw", core.SlidingWindowLog: "sl", core.SlidingWindowCounter: "sc", core.GCRA: "gc"}

// Key returns the Redis key that holds k's state under algorithm a:
// "<prefix>:{identity}:policy:<algorithm>", or "<prefix>:{identity}:<algorithm>"
// for a key without a policy. Only the identity is in the hash tag, so
// every policy of one identity shares a Cluster slot.
func (s *Store) Key(k core.Key, a core.Algorithm) string {
	return s.base(k) + algoCode[a]
}

// tag makes key safe inside a hash tag: braces and "%" percent-escaped, and a
// key longer than maxRawKey replaced by "#" and its SHA-256.
func tag(key string) string {
	if len(key) > maxRawKey {
		sum := sha256.Sum256([]byte(key))
		return "#" + base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	if !hasTagByte(key) {
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

// hasTagByte reports whether key holds a byte tag escapes ({, }, % or #):
// a loop of its own, as strings.ContainsAny builds its set of bytes on
// every call (the identity and policy of every decision are tested).
func hasTagByte(key string) bool {
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case '{', '}', '%', '#':
			return true
		}
	}
	return false
}
