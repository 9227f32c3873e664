package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

// binary is the ratelimitd built once for this test binary by TestMain:
// the integration tests run it as a process.
var binary string

// pg is one PostgreSQL server for this test binary (a database per test).
var pg *pgtest.Shared

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ratelimitd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	binary, err = ratelimitdtest.Build(ctx, ".", dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pg = pgtest.StartShared()
	defer pg.Close()
	return m.Run()
}
