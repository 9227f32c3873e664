// Command quickstart shows sluice's engine in memory: a burst of requests
// against each algorithm, with the decision, the remaining quota, the wait
// and the warning state of every request.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
)

func main() {
	// A clock that the demo moves by hand, so the output is the same on
	// every run: 12 requests, 100ms apart, against 10 per minute.
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter} {
		limit := core.PerMinute(10).WithAlgorithm(a)
		fmt.Fprintf(w, "\n%s (%s)\nrequest\tallowed\tremaining\tretry after\treset after\tstate\n", a, limit)
		// One op: a cost of 1 for client-42 under this limit.
		ops := []core.Op{{Key: core.Key{Identity: "client-42", Policy: "quickstart"}, Limit: limit, Cost: 1}}
		out := make([]core.Result, len(ops))
		for i := 1; i <= 12; i++ {
			if err := store.Take(ctx, ops, out); err != nil {
				log.Fatal(err)
			}
			r := out[0]
			fmt.Fprintf(w, "%d\t%v\t%d\t%s\t%s\t%s\n", i, r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter.Round(time.Millisecond), r.State)
			now = now.Add(100 * time.Millisecond)
		}
	}
	w.Flush()
}
