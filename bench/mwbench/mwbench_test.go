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
			h, err := impl.Wrap(mwbench.Bare())
			if err != nil {
				t.Fatal(err)
			}
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
