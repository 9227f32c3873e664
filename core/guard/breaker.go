package guard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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

// Circuit returns the breaker's current state.
func (s *Store) Circuit() Circuit { return Circuit(s.circuit.Load()) }

// admit decides whether a call may reach the backend. probe reports that
// this call is the half-open probe, which must end in succeed, fail or
// release. *now is the monotonic time if the caller already read it (0
// otherwise); admit fills it when it needs it.
func (s *Store) admit(now *int64) (probe, ok bool) {
	switch Circuit(s.circuit.Load()) {
	case Closed:
		return false, true
	case Open:
		if *now == 0 {
			*now = s.mono()
		}
		if *now-s.openedAt.Load() < int64(s.cfg.breaker.Cooldown) {
			return false, false
		}
		if !s.move(Open, HalfOpen, nil, 0) {
			return false, false // another caller is the probe
		}
		return true, true
	}
	return false, false // half-open: the probe is out
}

// succeed records a call that reached the backend and got an answer.
func (s *Store) succeed(probe bool) {
	if s.failures.Load() != 0 {
		s.failures.Store(0)
	}
	if probe {
		s.move(HalfOpen, Closed, nil, 0)
	}
}

// release returns the probe token unused (the caller's context ended), so
// the next call probes at once.
func (s *Store) release(probe bool) {
	if probe {
		s.move(HalfOpen, Open, nil, s.mono()-int64(s.cfg.breaker.Cooldown))
	}
}

// fail records a failed backend call and opens the circuit when the
// failures reach the threshold (or the probe failed).
func (s *Store) fail(_ context.Context, err error, probe bool) {
	s.report(err)
	if probe {
		s.move(HalfOpen, Open, err, s.mono())
		return
	}
	if s.failures.Add(1) >= int64(s.cfg.breaker.Failures) {
		s.move(Closed, Open, err, s.mono())
	}
}

// move changes the circuit from one state to another, if it is still in
// the first, and reports the transition; opened is the instant an Open
// circuit counts its cooldown from. Transitions are serialized, so
// observers see them in the order they happened.
func (s *Store) move(from, to Circuit, err error, opened int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if Circuit(s.circuit.Load()) != from {
		return false
	}
	if to == Open {
		s.openedAt.Store(opened)
		if from == Closed {
			s.downSince.Store(opened)
		}
	}
	s.circuit.Store(uint32(to))
	s.transition(from, to, err)
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
func (s *Store) transition(from, to Circuit, err error) {
	log := s.cfg.log
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
			time.Duration(s.mono()-s.downSince.Load()).Round(time.Millisecond))
		if fallback {
			log.Info("sluice: local fallback off")
		}
	}
	for _, o := range s.cfg.observers {
		o.CircuitChanged(from, to)
	}
}
