package mwbench_test

import (
	"testing"

	"github.com/sluicehq/sluice/bench/mwbench"
)

// TestImpls checks that every middleware admits the benchmark's requests and
// writes its headers, as Overhead expects.
func TestImpls(t *testing.T) {
	for _, impl := range mwbench.Impls() {
		t.Run(impl.Name, func(t *testing.T) {
			h, done, err := impl.Wrap(mwbench.Bare())
			if err != nil {
				t.Fatal(err)
			}
			defer done()
			w, r := mwbench.NewWriter(), mwbench.NewRequest()
			for range 100 {
				if err := mwbench.Check(h, w, r, !impl.Baseline); err != nil {
					t.Fatal(err)
				}
			}
			if impl.Baseline && len(w.Header()) != 0 {
				t.Errorf("bare handler wrote headers %v", w.Header())
			}
		})
	}
}

// TestFiberImpls checks that every Fiber app admits the benchmark's requests
// and that each middleware, and only a middleware, writes its headers.
func TestFiberImpls(t *testing.T) {
	for _, impl := range mwbench.FiberImpls() {
		t.Run(impl.Name, func(t *testing.T) {
			mws, done, err := impl.Handlers()
			if err != nil {
				t.Fatal(err)
			}
			defer done()
			a, err := mwbench.NewFiberApp(mws)
			if err != nil {
				t.Fatal(err)
			}
			for range 100 {
				if err := a.Check(!impl.Baseline); err != nil {
					t.Fatal(err)
				}
			}
			if impl.Baseline && a.Header("X-RateLimit-Remaining") != "" {
				t.Errorf("bare app wrote X-RateLimit-Remaining")
			}
		})
	}
}
