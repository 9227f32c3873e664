// Package schedlag measures how late this process's goroutines wake up, so
// a timing test can widen a wall-clock bound by what a loaded machine adds
// to it, and by nothing more on an idle one.
//
// A test that asserts "this call returns within its timeout plus a slack"
// starts a Probe before the timed section and adds Probe.Max to the slack:
// the probe sleeps in short steps on its own goroutine and records the
// largest overshoot of a sleep, which is the scheduling delay any goroutine
// of the test (or a deadline timer of the code under test) may also have
// suffered in the meantime.
package schedlag

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// step is how long the probe sleeps between measurements.
const step = time.Millisecond

// Probe records the largest wake-up delay seen since Start. Its methods
// are safe for concurrent use. It stops when the test that started it ends.
type Probe struct {
	max  atomic.Int64 // nanoseconds
	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
}

// Start starts a probe that runs until Stop or the end of t.
func Start(t testing.TB) *Probe {
	t.Helper()
	p := &Probe{stop: make(chan struct{})}
	p.done.Add(1)
	go p.run()
	t.Cleanup(p.Stop)
	return p
}

func (p *Probe) run() {
	defer p.done.Done()
	timer := time.NewTimer(step)
	defer timer.Stop()
	for {
		start := time.Now()
		timer.Reset(step)
		select {
		case <-p.stop:
			return
		case <-timer.C:
		}
		if late := int64(time.Since(start) - step); late > p.max.Load() {
			p.max.Store(late) // one writer: no lost update
		}
	}
}

// Max returns the largest delay, beyond its due time, with which the probe
// woke up since Start (zero when it never woke late).
func (p *Probe) Max() time.Duration {
	return time.Duration(p.max.Load())
}

// Stop ends the probe; Max keeps its last value. Calling it again does
// nothing.
func (p *Probe) Stop() {
	p.once.Do(func() {
		close(p.stop)
		p.done.Wait()
	})
}
