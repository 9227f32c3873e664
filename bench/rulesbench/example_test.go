package rulesbench_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench/rulesbench"
)

// An engine under 1 000 rules, and a short run of checks on it.
func Example() {
	ctx := context.Background()
	s, err := rulesbench.NewSetup(ctx, 1000)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	sample, err := s.Checks(ctx, 10*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(s.Snapshot.Rules()), "rules; the check matches", len(s.Snapshot.Match("", rulesbench.Dimension, rulesbench.Endpoint)), "of them;", sample.Checks >= 1000)
	// Output: 1000 rules; the check matches 3 of them; true
}
