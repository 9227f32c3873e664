package lease_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
)

// newMemory returns a memory store on clock, closed with the test.
func newMemory(t testing.TB, clock func() time.Time) *memorystore.Store {
	t.Helper()
	m, err := memorystore.New(memorystore.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// newLease returns a lease layer over inner on clock, closed with the test.
func newLease(t testing.TB, inner core.Store, opts ...lease.Option) *lease.Store {
	t.Helper()
	s, err := lease.New(inner, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The lease layer is a whole Store: every op without a Lease (all of the
// suite's) is decided by the store below, exactly.
func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		return newLease(t, newMemory(t, clock), lease.WithClock(clock))
	})
}
