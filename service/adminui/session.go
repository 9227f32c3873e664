package adminui

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
	"time"
)

// Session bounds.
const (
	// sessionIdle ends a session not used for this long.
	sessionIdle = 30 * time.Minute
	// sessionLife ends a session this long after sign-in, used or not.
	sessionLife = 8 * time.Hour
	// maxSessions bounds the sessions kept in memory.
	maxSessions = 1000
	// maxTokenSessions bounds the sessions of one token: its least
	// recently used goes first, so one token signing in over and over
	// never pushes other admins out of a full table.
	maxTokenSessions = 10
)

// session is one signed-in browser.
type session struct {
	id      string
	secret  string // the admin token, re-checked on every request; never sent to the browser
	csrf    string
	created time.Time
	seen    time.Time
}

// sessions is the bounded in-memory session table of one handler.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	max int
}

func newSessions(max int) *sessions { return &sessions{m: map[string]*session{}, max: max} }

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics if the OS cannot supply randomness)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *session) expired(now time.Time) bool {
	return now.Sub(s.seen) >= sessionIdle || now.Sub(s.created) >= sessionLife
}

// create starts a session signed in with secret. A token with
// maxTokenSessions sessions loses its least recently used one first. When
// the table is full, expired sessions go, then the least recently used.
func (t *sessions) create(secret string, now time.Time) *session {
	s := &session{id: randomID(), secret: secret, csrf: randomID(), created: now, seen: now}
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		var mine int
		var oldest *session
		for _, o := range t.m {
			if o.secret == secret {
				mine++
				if oldest == nil || o.seen.Before(oldest.seen) {
					oldest = o
				}
			}
		}
		if mine < maxTokenSessions {
			break
		}
		delete(t.m, oldest.id)
	}
	if len(t.m) >= t.max {
		for id, o := range t.m {
			if o.expired(now) {
				delete(t.m, id)
			}
		}
	}
	for len(t.m) >= t.max {
		var oldest *session
		for _, o := range t.m {
			if oldest == nil || o.seen.Before(oldest.seen) {
				oldest = o
			}
		}
		delete(t.m, oldest.id)
	}
	t.m[s.id] = s
	return s
}

// get returns the live session id (marking it used), or nil.
func (t *sessions) get(id string, now time.Time) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	if !ok {
		return nil
	}
	if s.expired(now) {
		delete(t.m, id)
		return nil
	}
	s.seen = now
	return s
}

// end removes the session id.
func (t *sessions) end(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

// len returns how many sessions are kept.
func (t *sessions) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
