package remotestore

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// PolicyPrefix starts the Policy of every Key the server hands its store:
// the store API has a key namespace of its own. A Key a client sends,
// {Identity, Policy}, is decided on the server's store as {Identity,
// PolicyPrefix + Policy} with every NUL and "%" of Policy percent-escaped
// (ServerKey). The keys of the server's own users of that store (a rule's
// counters, keyed by rule ID and identifier; the admin limits' admin_read
// and admin_write; core's idempotency records, idem/...) have policies of
// a-z A-Z 0-9 _ . : - / alone, never "~": no Key a client sends can name
// one of them, read it, reset it, or set or clear its override. The
// Identity is kept as it is, so every policy of one identity still lives
// in one Redis Cluster slot (the Redis store's hash tag), and the escaping
// leaves no NUL in the Policy (the Redis store cuts a Policy at its last
// NUL and moves the part before it into the hash tag).
const PolicyPrefix = "~store/"

// ServerKey is the Key the server decides k on: k's Identity, and
// PolicyPrefix followed by k's Policy with NUL and "%" percent-escaped.
// Distinct keys stay distinct.
func ServerKey(k core.Key) core.Key {
	buf := appendPolicy(nil, k.Policy)
	return core.Key{Identity: k.Identity, Policy: string(buf)}
}

// appendPolicy appends the namespaced policy of policy to buf.
func appendPolicy(buf []byte, policy string) []byte {
	buf = append(buf, PolicyPrefix...)
	for i := 0; i < len(policy); i++ {
		switch c := policy[i]; c {
		case 0:
			buf = append(buf, "%00"...)
		case '%':
			buf = append(buf, "%25"...)
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

// keyOf reads a key into the server's namespace (see ServerKey): its
// Identity aliases the message, its Policy is appended to buf and aliases
// it. The store copies what it keeps of a Key and buf is not written below
// its length again, so both stay valid for the call. A missing key is the
// zero Key, which the store rejects (no identity).
func keyOf(buf []byte, p *ratelimitv1.StoreKey) (core.Key, []byte) {
	if p == nil {
		return core.Key{}, buf
	}
	start := len(buf)
	buf = appendPolicy(buf, stringOf(p.Policy))
	policy := buf[start:]
	return core.Key{Identity: stringOf(p.Identity), Policy: unsafe.String(unsafe.SliceData(policy), len(policy))}, buf
}

// clientKey reads a key as the client sent it (for an audit record).
func clientKey(p *ratelimitv1.StoreKey) core.Key {
	if p == nil {
		return core.Key{}
	}
	return core.Key{Identity: string(p.Identity), Policy: string(p.Policy)}
}

// maxTargetPart is the longest part of a key written as is in a Change's
// Target; a longer one is cut and given with its length and digest.
const maxTargetPart = 256

// Target names a client's key in an audit record: "store/IDENTITY/POLICY",
// each part as it is when it is printable UTF-8 without "/", `"` or "\",
// quoted (strconv.Quote) otherwise, and over 256 bytes cut, quoted and
// followed by its length and SHA-256 prefix. The result is valid UTF-8,
// and two keys of parts up to 256 bytes never share a target.
func Target(k core.Key) string {
	return "store/" + targetPart(k.Identity) + "/" + targetPart(k.Policy)
}

// targetPart is one part of Target.
func targetPart(s string) string {
	if len(s) > maxTargetPart {
		sum := sha256.Sum256([]byte(s))
		return fmt.Sprintf("%s(%d bytes, sha256 %x)", strconv.Quote(s[:64]), len(s), sum[:12])
	}
	if plain(s) {
		return s
	}
	return strconv.Quote(s)
}

// plain reports whether s is written in a Target as it is: not empty,
// valid UTF-8, every rune printable and none of / " \.
func plain(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !unicode.IsPrint(r) || r == '/' || r == '"' || r == '\\'
	})
}
