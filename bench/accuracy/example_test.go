package accuracy_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/bench/accuracy"
	"github.com/sluicehq/sluice/core"
)

// The attack a fixed window cannot see: 10 requests at the end of one
// window and 10 more at the start of the next. Replayed against the fixed
// window and against the exact sliding log.
func Example() {
	l := core.PerSecond(10).WithAlgorithm(core.FixedWindow)
	start := int64(1_800_000_000) * 1_000_000 // µs, aligned on the second
	tr := &accuracy.Trace{Name: "boundary", Clients: 1, Start: start, End: start + 2_000_000}
	for i := range int64(10) {
		tr.Requests = append(tr.Requests, accuracy.Request{At: start + 990_000 + i*1_000})
	}
	for i := range int64(10) {
		tr.Requests = append(tr.Requests, accuracy.Request{At: start + 1_000_000 + i*1_000})
	}
	ctx := context.Background()
	fixed, store, err := accuracy.NewSluice(l, tr.Clients)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	for _, c := range []struct {
		name string
		d    accuracy.Decider
	}{{"fixed window", fixed}, {"exact log", accuracy.NewExact(l, tr.Clients)}} {
		m, err := accuracy.Replay(ctx, tr, l, c.d)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: admitted %d of %d, most in one second %d, wrongly allowed %d\n",
			c.name, m.Admitted, m.Requests, m.MaxWindow, m.WronglyAllowed)
	}
	// Output:
	// fixed window: admitted 20 of 20, most in one second 20, wrongly allowed 10
	// exact log: admitted 10 of 20, most in one second 10, wrongly allowed 0
}
