package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A policy decided in memory from blocks of its store's units: 100
// requests, of which the store decides a handful (the first alone, then
// blocks that double while the traffic lasts).
func Example() {
	shared, _ := memorystore.New() // a Redis store, usually, under a guard
	defer shared.Close()
	leased, _ := lease.New(shared)
	defer leased.Close()
	lim, _ := core.NewLimiter(leased, []core.Policy{{
		Name:  "global",
		Key:   keyfunc.Const("all"),
		Limit: core.Per(1000, time.Hour).WithAlgorithm(core.FixedWindow),
		Lease: time.Second,
	}})
	admitted := 0
	for range 100 {
		d, _ := lim.Check(context.Background(), keyfunc.Static{})
		if d.Allowed {
			admitted++
		}
	}
	st := leased.Stats()
	fmt.Println("admitted:", admitted, "store calls:", st.Takes, "decided in memory:", st.Local)
	// Output: admitted: 100 store calls: 6 decided in memory: 94
}
