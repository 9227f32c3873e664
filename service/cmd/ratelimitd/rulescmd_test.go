package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// runRules runs `ratelimitd rules args...` in this process, with no
// environment (runCmd).
func runRules(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCmd(t, nil, append([]string{"rules"}, args...)...)
}

func TestRulesImportExport(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testRulesImportExport(t, "file:"+filepath.Join(t.TempDir(), "rules.db"))
	})
	t.Run("postgres", func(t *testing.T) { t.Parallel(); testRulesImportExport(t, pg.NewDatabase(t)) })
}

func testRulesImportExport(t *testing.T, dsn string) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.json")
	require.NoError(t, os.WriteFile(in, []byte(`[
  {"id": "orders-gold", "name": "gold", "dimension": "user", "endpoint_pattern": "/api/orders/**",
   "limit": 1000, "window_seconds": 60, "algorithm": "gcra", "tier": "gold"},
  {"id": "orders", "name": "orders", "dimension": "user", "endpoint_pattern": "/api/orders/**",
   "limit": 100, "window_seconds": 60, "algorithm": "token_bucket", "burst": 20}
]`), 0o600))
	code, out, errOut := runRules(t, "import", in, "--db", dsn, "--actor", "ops")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "imported 2 of 2 rules")

	outFile := filepath.Join(dir, "out.json")
	code, _, errOut = runRules(t, "export", "--db", dsn, outFile)
	require.Equal(t, 0, code, errOut)
	f, err := os.Open(outFile)
	require.NoError(t, err)
	defer f.Close()
	rs, err := rulesdb.ReadRules(f)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	require.Equal(t, "orders", rs[0].ID)
	require.True(t, rs[0].Enabled, "enabled defaults to true on import")
	require.Equal(t, "gold", rs[1].Tier)

	// Re-importing the export is accepted (replaces in place).
	code, _, errOut = runRules(t, "import", outFile, "--db", dsn)
	require.Equal(t, 0, code, errOut)

	// An invalid rule is refused naming the field; nothing of it is stored.
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`[{"id": "x", "dimension": "ip", "limit": 5, "window_seconds": 60, "algorithm": "leaky"}]`), 0o600))
	code, _, errOut = runRules(t, "import", bad, "--db", dsn)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "algorithm")
	code, out, _ = runRules(t, "export", "--db", dsn)
	require.Equal(t, 0, code)
	require.NotContains(t, out, `"id": "x"`)

	// One transaction: a file whose third rule conflicts with the first
	// (same dimension and endpoint pattern, no tier) writes nothing.
	conflict := filepath.Join(dir, "conflict.json")
	require.NoError(t, os.WriteFile(conflict, []byte(`[
  {"id": "c1", "dimension": "ip", "endpoint_pattern": "/c/**", "limit": 5, "window_seconds": 60, "algorithm": "gcra"},
  {"id": "c2", "dimension": "ip", "endpoint_pattern": "/d/**", "limit": 5, "window_seconds": 60, "algorithm": "gcra"},
  {"id": "c3", "dimension": "ip", "endpoint_pattern": "/c/**", "limit": 9, "window_seconds": 60, "algorithm": "gcra"}
]`), 0o600))
	code, out, errOut = runRules(t, "import", conflict, "--db", dsn)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "endpoint_pattern")
	require.Contains(t, errOut, "nothing imported")
	require.NotContains(t, out, "imported")
	code, out, _ = runRules(t, "export", "--db", dsn)
	require.Equal(t, 0, code)
	require.NotContains(t, out, `"c1"`)
	require.NotContains(t, out, `"c2"`)

	// --db may come from RATELIMITD_DB, as serve's.
	var o, e bytes.Buffer
	env := func(k string) (string, bool) { return dsn, k == "RATELIMITD_DB" }
	require.Equal(t, 0, run(context.Background(), []string{"rules", "export"}, &o, &e, env), e.String())
	require.Contains(t, o.String(), `"orders"`)

	code, _, errOut = runRules(t, "import", in)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--db")
	code, _, _ = runRules(t, "frobnicate")
	require.Equal(t, 2, code)
}
