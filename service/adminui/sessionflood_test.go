package adminui

import (
	"net/http"
	"testing"
)

// TestSignInsOfOneTokenEvictNoOtherSession: the session table is bounded
// (maxSessions), the least recently used going first; one token signing
// in over and over (any read token, at no rate limit) must not push every
// other admin's session out: a token keeps at most maxTokenSessions, its
// own oldest going first.
func TestSignInsOfOneTokenEvictNoOtherSession(t *testing.T) {
	s := newStack(t)
	alice := s.client()
	alice.login(s.write)
	if r := alice.get("/admin/"); r.status != http.StatusOK {
		t.Fatalf("alice: %d", r.status)
	}
	var last *client
	for range maxSessions + 10 {
		last = s.client()
		last.login(s.read)
	}
	if r := alice.get("/admin/"); r.status != http.StatusOK {
		t.Fatalf("alice's session was evicted by bob's sign-ins: %d %s", r.status, r.header.Get("Location"))
	}
	if r := last.get("/admin/"); r.status != http.StatusOK {
		t.Fatalf("bob's latest session: %d", r.status)
	}
	if n := s.h.sess.len(); n > maxTokenSessions+1 {
		t.Fatalf("%d sessions kept, want at most %d", n, maxTokenSessions+1)
	}
}
