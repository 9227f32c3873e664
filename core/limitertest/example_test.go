package limitertest_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
)

// A store proves its conformance with one call in its tests.
func ExampleRun() {
	_ = func(t *testing.T) {
		limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
			s, err := memorystore.New(memorystore.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	}
}
