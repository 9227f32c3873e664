package core

import (
	"testing"
	"unsafe"
)

// A Decision is allocated once per request (by the adapters): it stays in
// the allocator's 512-byte size class, with the one op a request of one
// policy is decided by (see Limiter.run) inside it.
func TestDecisionFitsTheSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Decision{}); n > 512 {
		t.Fatalf("a Decision is %d bytes, over the 512-byte size class", n)
	}
}
