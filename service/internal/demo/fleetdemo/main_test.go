package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

// binary is the ratelimitd built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fleetdemo-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if binary, err = ratelimitdtest.Build(ctx, "../../../cmd/ratelimitd", dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// TestFleetDemo runs `make fleet-demo`'s program and checks what it
// prints: the README's second way to run ratelimitd, PostgreSQL and Redis
// for a fleet of instances.
func TestFleetDemo(t *testing.T) {
	redistest.Binary(t) // skipped without redis-server (a failure under make test)
	if bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(bins) == 0 && os.Getenv(pgtest.BinDirEnv) == "" && !pgtest.Required() {
		t.Skip("no PostgreSQL (make deps installs it; SLUICE_REQUIRE_POSTGRES=1 makes this a failure)")
	}
	var out bytes.Buffer
	start := time.Now()
	err := run(context.Background(), &out, config{Bin: binary, Timeout: 60 * time.Second})
	require.NoError(t, err, out.String())
	s := out.String()
	t.Logf("%s(%v)", s, time.Since(start))
	for _, re := range []string{
		`(?m)^PostgreSQL on 127\.0\.0\.1:\d+ `,
		`(?m)^Redis on 127\.0\.0\.1:\d+$`,
		`(?m)^token \(shown once, stored hashed\): slk_\S+$`,
		`(?m)^== instance A: ratelimitd serve --db postgres://\S+ --redis redis://127\.0\.0\.1:\d+ --rules-cache \S+/a\.json`,
		`(?m)^== instance B: ratelimitd serve --db postgres://\S+ --redis redis://127\.0\.0\.1:\d+ --rules-cache \S+/b\.json`,
		`(?m)^201 Created, ETag "\d+"; B decides under it \S+ after A's answer$`,
		`(?m)^ 1  A  allowed  rule=orders  limit=10  remaining=9$`,
		`(?m)^ 2  B  allowed  rule=orders  limit=10  remaining=8$`,
		`(?m)^10  B  allowed  rule=orders  limit=10  remaining=0$`,
		`(?m)^11  A  denied   rule=orders  limit=10  remaining=0  retry_after=`,
		`(?m)^14  B  denied   rule=orders  limit=10  remaining=0  retry_after=`,
		`(?m)^admitted 10 of 14: exactly the limit, across both instances$`,
		`(?m)^rules cache of A: \S+/a\.json \(\d+ bytes\)$`,
		`(?m)^rules cache of B: \S+/b\.json \(\d+ bytes\)$`,
	} {
		require.Regexp(t, re, s)
	}
	// B follows A's change within a second (the propagation target).
	m := regexp.MustCompile(`(?m)^200 OK, ETag "\d+"; B decides under limit 20 (\S+) after A's answer$`).FindStringSubmatch(s)
	require.NotNil(t, m, s)
	took, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	require.Less(t, took, time.Second)
	// Everything stopped and removed: the directory, and PostgreSQL's and
	// Redis's ports closed.
	m = regexp.MustCompile(`(?m)^everything stopped; (\S+) removed$`).FindStringSubmatch(s)
	require.NotNil(t, m, s)
	_, err = os.Stat(m[1])
	require.ErrorIs(t, err, os.ErrNotExist)
	for _, re := range []string{`PostgreSQL on 127\.0\.0\.1:(\d+)`, `Redis on 127\.0\.0\.1:(\d+)`, `serves HTTP on 127\.0\.0\.1:(\d+)`} {
		port := regexp.MustCompile(re).FindStringSubmatch(s)
		require.NotNil(t, port, re)
		p, err := strconv.Atoi(port[1])
		require.NoError(t, err)
		require.True(t, portFree(p), "port %d must be closed after the demo", p)
	}
}

// portFree reports whether nothing listens on 127.0.0.1:port.
func portFree(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return true
	}
	_ = c.Close()
	return false
}
