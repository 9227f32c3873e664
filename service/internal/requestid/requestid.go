// Package requestid makes and checks the request ids of ratelimitd's admin
// API and admin page (the X-Request-Id header, recorded in the audit rows a
// request writes).
package requestid

import (
	"crypto/rand"
	"encoding/hex"
)

// MaxLen is the longest request id a client may give.
const MaxLen = 128

// New returns a fresh request id: 16 random bytes in hex.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it panics if the OS cannot supply randomness)
	return hex.EncodeToString(b[:])
}

// Valid reports whether a client's X-Request-Id is kept: 1 to MaxLen of
// A-Z a-z 0-9 - _ . :.
func Valid(id string) bool {
	if id == "" || len(id) > MaxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}
