package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

func Example() {
	ctx := context.Background()
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	src := rules.NewBytes("rules.yaml", []byte(`
rules:
  - name: orders-per-user
    dimension: user
    endpoints: [/api/v1/orders]
    algorithm: fixed_window
    rate: 3
    period: 1h
`))
	e, err := engine.New(ctx, store, src)
	if err != nil {
		panic(err)
	}
	c := engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/api/v1/orders", Cost: 1}
	for range 4 {
		r, err := e.Check(ctx, c)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Allowed, r.Rule, r.Remaining, r.State)
	}
	// A check no rule applies to is allowed and counts nothing.
	r, _ := e.Check(ctx, engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/health", Cost: 1})
	fmt.Printf("%v %q\n", r.Allowed, r.Rule)
	// Output:
	// true orders-per-user 2 normal
	// true orders-per-user 1 normal
	// true orders-per-user 0 warning
	// false orders-per-user 0 throttled
	// true ""
}

// Usage shows where a caller stands under every rule of its dimension,
// with its tier and override resolved, consuming nothing.
func ExampleEngine_Usage() {
	ctx := context.Background()
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	s, err := rules.New("7", []*rules.Rule{
		{ID: "orders", Dimension: "user", Endpoints: []string{"/api/v1/orders"}, Limit: core.PerHour(3).WithAlgorithm(core.FixedWindow)},
		{ID: "reads", Dimension: "user", Limit: core.PerHour(100).WithAlgorithm(core.FixedWindow)},
	}, nil, rules.Override{RuleID: "orders", Dimension: "user", Identifier: "alice", Limit: core.PerHour(10).WithAlgorithm(core.FixedWindow), Until: time.Now().Add(time.Hour)})
	if err != nil {
		panic(err)
	}
	e, err := engine.New(ctx, store, snapshot{s}, engine.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	for range 2 {
		if _, err := e.Check(ctx, engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/api/v1/orders", Cost: 1}); err != nil {
			panic(err)
		}
	}
	us, err := e.Usage(ctx, "user", "alice")
	if err != nil {
		panic(err)
	}
	for _, u := range us {
		fmt.Println(u.Rule.ID, u.Limit, "override:", u.Override != nil, "used:", u.Used, "of", u.Capacity)
	}
	// Output:
	// orders 10/1h0m0s fixed_window override: true used: 2 of 10
	// reads 100/1h0m0s fixed_window override: false used: 2 of 100
}

// snapshot is a rules.Source of one snapshot that never changes.
type snapshot struct{ s *rules.Snapshot }

func (s snapshot) Load(context.Context) (*rules.Snapshot, error) { return s.s, nil }

func (s snapshot) Watch(ctx context.Context, _ func(*rules.Snapshot) error, _ func(error)) error {
	<-ctx.Done()
	return nil
}
