package guard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Circuit is the state of a Store's circuit breaker.
type Circuit uint32

// The circuit states.
const (
	// Closed: calls go to the backend.
	Closed Circuit = iota
	// Open: the backend is failing; calls are answered by the Mode without
	// reaching it, until the cooldown ends.
	Open
	// HalfOpen: one call probes the backend; the others are answered by the
	// Mode until the probe succeeds (Closed) or fails (Open).
	HalfOpen
)

// String returns "closed", "open" or "half_open".
func (c Circuit) String() string {
	switch c {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("Circuit(%d)", uint32(c))
}

// ErrorKind classifies a backend failure for metrics.
type ErrorKind uint8

// The kinds of backend failure.
const (
	// KindTimeout: the call ran out of time.
	KindTimeout ErrorKind = iota
	// KindConnection: the connection failed (refused, reset, closed).
	KindConnection
	// KindClosed: the backend was used after Close.
	KindClosed
	// KindBackend: the backend answered with an error (a Redis error reply
	// such as LOADING, READONLY or CLUSTERDOWN, say).
	KindBackend
)

// String returns "timeout", "connection", "closed" or "backend".
func (k ErrorKind) String() string {
	switch k {
	case KindTimeout:
		return "timeout"
	case KindConnection:
		return "connection"
	case KindClosed:
		return "closed"
	case KindBackend:
		return "backend"
	}
	return fmt.Sprintf("ErrorKind(%d)", uint8(k))
}

// Classify returns the kind of a backend error.
func Classify(err error) ErrorKind {
	var ne net.Error
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return KindTimeout
	case errors.Is(err, core.ErrClosed):
		return KindClosed
	case errors.As(err, &op), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return KindConnection
	}
	return KindBackend
}

// Observer sees what a Store's backend does: metrics modules implement it
// (see adapters/promlimit). Methods are called in the requesting goroutine
// and must be quick.
type Observer interface {
	// CircuitChanged is called on every transition of the breaker.
	CircuitChanged(from, to Circuit)
	// BackendFailed is called for every failed or timed-out backend call.
	BackendFailed(kind ErrorKind, err error)
}

// breaker is the circuit of the whole backend, or of one of its nodes.
type breaker struct {
	node      string        // "" for the whole backend
	mu        sync.Mutex    // serializes transitions
	circuit   atomic.Uint32 // a Circuit
	failures  atomic.Int64  // consecutive failures while closed
	openedAt  atomic.Int64  // ns since epoch when the circuit last opened
	downSince atomic.Int64  // ns since epoch when it opened after being closed
}

// Sharded is a backend whose keys live on nodes that fail independently,
// such as the Redis store on a Cluster. The Store keeps one circuit breaker
// per node of such a backend, so a dead node costs its own keys
// microseconds (its circuit opens) and the other nodes' keys nothing.
type Sharded interface {
	// Node returns the node that serves k, or "" when the backend cannot
	// tell or all keys share one server. It must be quick: it is called on
	// every decision.
	Node(k core.Key) string
}

// Bounded is a backend that bounds each of its calls by itself, queueing
// included, and fails one that runs longer with an error wrapping
// context.DeadlineExceeded, such as the Redis store (its WithTimeout). The
// Store calls a Bounded backend whose Timeout is at most its own (see
// WithTimeout) on the caller's context as it is: the backend's bound is the
// tighter one, and a context with a timer of the Store's own would cost
// every decision allocations and a timer.
type Bounded interface {
	// Timeout returns the longest a call of the backend runs. It is read
	// once, when the Store is built.
	Timeout() time.Duration
}

// NodeError is implemented by backend errors that name the node that
// failed; a failure without it counts against every node of the call.
type NodeError interface {
	error
	FailedNode() string
}

// NodeObserver is an Observer that is also told which node's circuit
// changed ("" for the whole backend).
type NodeObserver interface {
	NodeCircuitChanged(node string, from, to Circuit)
}

// maxNodes bounds the breakers kept per Store; past it, closed breakers of
// nodes are forgotten (nodes come and go with failovers).
const maxNodes = 1024

// breakerFor returns the breaker of node ("" for the whole backend).
func (s *Store) breakerFor(node string) *breaker {
	if node == "" {
		return &s.whole
	}
	if m := s.nodes.Load(); m != nil {
		if b := (*m)[node]; b != nil {
			return b
		}
	}
	s.nodesMu.Lock()
	defer s.nodesMu.Unlock()
	old := map[string]*breaker{}
	if m := s.nodes.Load(); m != nil {
		if b := (*m)[node]; b != nil {
			return b
		}
		old = *m
	}
	next := make(map[string]*breaker, len(old)+1)
	for k, b := range old {
		if len(old) < maxNodes || Circuit(b.circuit.Load()) != Closed {
			next[k] = b
		}
	}
	b := &breaker{node: node}
	next[node] = b
	s.nodes.Store(&next)
	return b
}

// nodeOf returns the breaker of k's node.
func (s *Store) nodeOf(k core.Key) *breaker {
	if s.sharded == nil {
		return &s.whole
	}
	return s.breakerFor(s.sharded.Node(k))
}

// Circuit returns the breaker's current state: for a Sharded backend, the
// most open of its nodes' circuits (Open, then HalfOpen, then Closed).
func (s *Store) Circuit() Circuit {
	c := Circuit(s.whole.circuit.Load())
	if m := s.nodes.Load(); m != nil {
		for _, b := range *m {
			switch n := Circuit(b.circuit.Load()); {
			case n == Open:
				return Open
			case n == HalfOpen:
				c = HalfOpen
			}
		}
	}
	return c
}

// Circuits returns the state of every node's circuit of a Sharded backend
// (the whole backend's under ""), for diagnostics.
func (s *Store) Circuits() map[string]Circuit {
	out := map[string]Circuit{"": Circuit(s.whole.circuit.Load())}
	if m := s.nodes.Load(); m != nil {
		for k, b := range *m {
			out[k] = Circuit(b.circuit.Load())
		}
	}
	return out
}

// admit decides whether a call may reach the backend through b. probe
// reports that this call is the half-open probe, which must end in succeed,
// fail or release. *now is the monotonic time if the caller already read it
// (0 otherwise); admit fills it when it needs it.
func (s *Store) admit(b *breaker, now *int64) (probe, ok bool) {
	switch Circuit(b.circuit.Load()) {
	case Closed:
		return false, true
	case Open:
		if *now == 0 {
			*now = s.mono()
		}
		if *now-b.openedAt.Load() < int64(s.cfg.breaker.Cooldown) {
			return false, false
		}
		if !s.move(b, Open, HalfOpen, nil, 0) {
			return false, false // another caller is the probe
		}
		return true, true
	}
	return false, false // half-open: the probe is out
}

// succeed records a call through b that reached the backend and got an
// answer.
func (s *Store) succeed(b *breaker, probe bool) {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if probe {
		s.move(b, HalfOpen, Closed, nil, 0)
	}
}

// release returns the probe token unused (the caller's context ended), so
// the next call probes at once.
func (s *Store) release(b *breaker, probe bool) {
	if probe {
		s.move(b, HalfOpen, Open, nil, s.mono()-int64(s.cfg.breaker.Cooldown))
	}
}

// fail records a failed backend call through b and opens its circuit when
// the failures reach the threshold (or the probe failed).
func (s *Store) fail(b *breaker, err error, probe bool) {
	if probe {
		s.move(b, HalfOpen, Open, err, s.mono())
		return
	}
	if b.failures.Add(1) >= int64(s.cfg.breaker.Failures) {
		s.move(b, Closed, Open, err, s.mono())
	}
}

// move changes b's circuit from one state to another, if it is still in the
// first, and reports the transition; opened is the instant an Open circuit
// counts its cooldown from. Transitions are serialized, so observers see
// them in the order they happened.
func (s *Store) move(b *breaker, from, to Circuit, err error, opened int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if Circuit(b.circuit.Load()) != from {
		return false
	}
	if to == Open {
		b.openedAt.Store(opened)
		if from == Closed {
			b.downSince.Store(opened)
		}
	}
	b.circuit.Store(uint32(to))
	s.transition(b, from, to, err)
	return true
}

func (s *Store) report(err error) {
	s.failed.Add(1)
	if len(s.cfg.observers) == 0 {
		return
	}
	k := Classify(err)
	for _, o := range s.cfg.observers {
		o.BackendFailed(k, err)
	}
}

// transition logs a breaker transition and tells the observers.
func (s *Store) transition(b *breaker, from, to Circuit, err error) {
	log := s.cfg.log
	if b.node != "" {
		log = log.With("node", b.node)
	}
	fallback := s.cfg.mode == ModeFallback
	switch to {
	case Open:
		if from == Closed {
			log.Warn("sluice: backend failing, circuit open", "mode", s.cfg.mode.String(),
				"failures", s.cfg.breaker.Failures, "cooldown", s.cfg.breaker.Cooldown, "err", err)
			if fallback {
				log.Warn("sluice: local fallback on", "instances", s.cfg.instances)
			}
		} else {
			log.Info("sluice: probe failed, circuit open again", "cooldown", s.cfg.breaker.Cooldown, "err", err)
		}
	case HalfOpen:
		log.Info("sluice: circuit half-open, probing the backend")
	case Closed:
		log.Info("sluice: backend recovered, circuit closed", "down",
			time.Duration(s.mono()-b.downSince.Load()).Round(time.Millisecond))
		if fallback {
			log.Info("sluice: local fallback off")
		}
	}
	for _, o := range s.cfg.observers {
		o.CircuitChanged(from, to)
		if no, ok := o.(NodeObserver); ok {
			no.NodeCircuitChanged(b.node, from, to)
		}
	}
}
