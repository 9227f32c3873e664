package rulesdb_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// Example stores a rule, reads it back as the engine's snapshot and shows
// its audit row.
func Example() {
	dir, err := os.MkdirTemp("", "rulesdb-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx := context.Background()
	db, err := rulesdb.Open(ctx, filepath.Join(dir, "rules.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = db.Close() }()

	r, err := db.Create(ctx, "alice", rulesdb.Rule{
		ID: "orders", Name: "Orders API", Dimension: "user", EndpointPattern: "/api/orders/**",
		Limit: 100, WindowSeconds: 60, Algorithm: "token_bucket", Burst: 20, Enabled: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("etag", r.ETag)

	_, err = db.Create(ctx, "alice", rulesdb.Rule{ID: "bad", Dimension: "user", Limit: 10, WindowSeconds: 0, Algorithm: "gcra", Enabled: true})
	fmt.Println(err)

	snap, err := db.Source(0).Load(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, rule := range snap.Match("", "user", "/api/orders/42") {
		fmt.Println("revision", snap.Revision(), "matches", rule.ID, rule.Limit)
	}
	log, err := db.Audit(ctx, 0, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range log {
		fmt.Println(e.Revision, e.Actor, e.Action, e.Target)
	}
	// Output:
	// etag "1"
	// rulesdb: invalid rule: rule "bad": window_seconds: must be at least 1 (and at most 100 years), got 0
	// revision 1 matches orders 100/1m0s token_bucket burst=20
	// 1 alice rule.create rule/orders
}

// ExampleOpenSource serves the last good rules from the disk cache while
// the database cannot be reached (here: a SQLite path in a directory that
// does not exist stands in for a PostgreSQL server that is down); Watch
// would keep trying to connect and reload once it can.
func ExampleOpenSource() {
	dir, err := os.MkdirTemp("", "rulesdb-cache-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx := context.Background()
	cache := filepath.Join(dir, "rules-cache.json")

	db, err := rulesdb.Open(ctx, filepath.Join(dir, "rules.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = db.Create(ctx, "alice", rulesdb.Rule{ID: "login", Dimension: "ip", EndpointPattern: "/login",
		Limit: 5, WindowSeconds: 60, Algorithm: "sliding_window_counter", Enabled: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	snap, err := db.Source(0, rulesdb.WithCache(cache)).Load(ctx) // writes the cache
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("from the database:", snap.Revision())
	_ = db.Close()

	src, err := rulesdb.OpenSource(ctx, filepath.Join(dir, "down", "rules.db"), 0, rulesdb.WithCache(cache))
	if err != nil {
		fmt.Println(err)
		return
	}
	snap, err = src.Load(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("from the cache:", snap.Revision(), "connected:", src.DB() != nil)
	for _, r := range snap.Match("", "ip", "/login") {
		fmt.Println(r.ID, r.Limit)
	}
	// Output:
	// from the database: 1
	// from the cache: 1 (cached) connected: false
	// login 5/1m0s sliding_window_counter
}
