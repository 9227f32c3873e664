package daemon

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// health is the service's component health: the store reachable, rules
// loaded, not draining. Every change is passed on to the listeners (the
// gRPC health service, the metrics); /readyz reads it.
type health struct {
	mu        sync.Mutex
	store     bool
	rules     bool
	draining  bool
	revision  string
	loadedAt  time.Time
	listeners []func(component string, ok bool)
	now       func() time.Time
	// rulesListener, with --db on PostgreSQL, reads the state of the
	// rules listener (shown by /readyz; it does not make the service
	// unready: the poll still follows the database).
	rulesListener func() rulesdb.ListenerState
}

// The components, as grpc.health.v1 and the metrics name them.
const (
	componentStore    = "store"
	componentRules    = "rules"
	componentDraining = "draining"
)

func newHealth() *health { return &health{now: time.Now} }

// listen adds a function told of every component change (ok: healthy; for
// "draining", ok means not draining), first of the current state. The
// functions are called in the order of the changes, under h's lock (so a
// listener never sees a stale value after a newer one): they must be quick
// and must not call h.
func (h *health) listen(f func(component string, ok bool)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listeners = append(h.listeners, f)
	f(componentStore, h.store)
	f(componentRules, h.rules)
	f(componentDraining, !h.draining)
}

func (h *health) set(component string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch component {
	case componentStore:
		h.store = ok
	case componentRules:
		h.rules = ok
	case componentDraining:
		h.draining = !ok
	}
	for _, f := range h.listeners {
		f(component, ok)
	}
}

// setRules records the rules in force.
func (h *health) setRules(revision string, loadedAt time.Time) {
	h.mu.Lock()
	h.revision, h.loadedAt = revision, loadedAt
	h.mu.Unlock()
	h.set(componentRules, true)
}

// Readiness is the /readyz body.
type Readiness struct {
	Ready    bool   `json:"ready"`
	Store    bool   `json:"store"`
	Rules    bool   `json:"rules"`
	Draining bool   `json:"draining"`
	Revision string `json:"rules_revision,omitempty"`
	// Cached: the rules in force were read from --rules-cache because the
	// database could not be reached (the revision ends in " (cached)").
	Cached bool `json:"rules_cached"`
	// LoadedAt and AgeSeconds say when the rules in force were loaded.
	LoadedAt   *time.Time `json:"rules_loaded_at,omitempty"`
	AgeSeconds float64    `json:"rules_age_seconds"`
	// Listener, Since and Reconnects are the state of the PostgreSQL
	// listener of --db ("up" or "down", since when, how many times it
	// was re-established); absent without one.
	Listener           string     `json:"rules_listener,omitempty"`
	ListenerSince      *time.Time `json:"rules_listener_since,omitempty"`
	ListenerReconnects *int64     `json:"rules_listener_reconnects,omitempty"`
}

func (h *health) readiness() Readiness {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Readiness{Store: h.store, Rules: h.rules, Draining: h.draining, Revision: h.revision,
		Cached: strings.HasSuffix(h.revision, rulesdb.CachedSuffix)}
	r.Ready = r.Store && r.Rules && !r.Draining
	if !h.loadedAt.IsZero() {
		at := h.loadedAt.UTC()
		r.LoadedAt = &at
		r.AgeSeconds = h.now().Sub(h.loadedAt).Seconds()
	}
	if h.rulesListener != nil {
		if l := h.rulesListener(); l.Enabled {
			r.Listener = "down"
			if l.Up {
				r.Listener = "up"
			}
			if !l.Since.IsZero() {
				since := l.Since.UTC()
				r.ListenerSince = &since
			}
			r.ListenerReconnects = &l.Reconnects
		}
	}
	return r
}

// watchListener makes /readyz report the rules listener's state, read by
// state.
func (h *health) watchListener(state func() rulesdb.ListenerState) {
	h.mu.Lock()
	h.rulesListener = state
	h.mu.Unlock()
}

// serveLive answers /healthz: the process is up (200 while it runs,
// draining included).
func (h *health) serveLive(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}

// serveReady answers /readyz: 200 when the store is reachable, rules are
// loaded and the service is not draining, 503 otherwise; the JSON body
// says which and names the rules revision and its age.
func (h *health) serveReady(w http.ResponseWriter, _ *http.Request) {
	r := h.readiness()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !r.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(r)
}
