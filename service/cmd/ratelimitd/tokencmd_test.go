package main

import (
	"bytes"
	"context"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

func TestTokenCommands(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); testTokenCommands(t, "file:"+filepath.Join(t.TempDir(), "rules.db")) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); testTokenCommands(t, pg.NewDatabase(t)) })
}

func testTokenCommands(t *testing.T, dsn string) {
	u, err := user.Current()
	require.NoError(t, err)

	// create: the secret alone on stdout, the warning on stderr.
	code, out, errOut := runCmd(t, nil, "token", "create", "ci-deploy", "--scope", "write", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	secret := strings.TrimSuffix(out, "\n")
	require.Equal(t, secret+"\n", out)
	require.True(t, strings.HasPrefix(secret, rulesdb.TokenPrefix), out)
	require.NotContains(t, secret, " ")
	require.Contains(t, errOut, "cannot be shown again")
	require.NotContains(t, errOut, secret)

	// RATELIMITD_DB stands for --db; flags may come first.
	code, out2, errOut := runCmd(t, []string{"RATELIMITD_DB=" + dsn}, "token", "create", "--scope", "read", "dashboard")
	require.Equal(t, 0, code, errOut)
	require.NotEqual(t, out, out2)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	tok, err := db.Authenticate(ctx, secret)
	require.NoError(t, err)
	require.Equal(t, rulesdb.ScopeWrite, tok.Scope)
	tok, err = db.Authenticate(ctx, strings.TrimSpace(out2))
	require.NoError(t, err)
	require.Equal(t, "dashboard", tok.Name)

	// list: names, scopes, times; never a secret or a hash.
	code, out, errOut = runCmd(t, nil, "token", "list", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `^NAME\s+SCOPE\s+CREATED\s+REVOKED$`, lines[0])
	require.Regexp(t, `^ci-deploy\s+write\s+\d{4}-\d\d-\d\dT\S+\s+-$`, lines[1])
	require.Regexp(t, `^dashboard\s+read\s+`, lines[2])
	require.NotContains(t, out, "slk_")
	require.NotRegexp(t, `[0-9a-f]{64}`, out)

	// revoke: refused from then on, listed with its time.
	code, _, errOut = runCmd(t, nil, "token", "revoke", "ci-deploy", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	_, err = db.Authenticate(ctx, secret)
	require.ErrorIs(t, err, rulesdb.ErrUnauthorized)
	code, out, _ = runCmd(t, nil, "token", "list", "--db", dsn)
	require.Equal(t, 0, code)
	require.Regexp(t, `ci-deploy\s+write\s+\S+\s+\d{4}-`, out)

	// The audit names the OS user.
	es, err := db.Audit(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, es, 3)
	for _, e := range es {
		require.Equal(t, "cli:"+u.Username, e.Actor)
	}
	require.Equal(t, "token.revoke", es[2].Action)

	// Errors: exit 1 with the reason on stderr, nothing on stdout.
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"token", "create", "ci-deploy", "--scope", "read", "--db", dsn}, 1, "already exists"},
		{[]string{"token", "revoke", "ci-deploy", "--db", dsn}, 1, "no valid token"},
		{[]string{"token", "create", "bad name", "--scope", "read", "--db", dsn}, 1, "token name"},
		{[]string{"token", "create", "x", "--scope", "admin", "--db", dsn}, 2, "--scope"},
		{[]string{"token", "create", "x", "--db", dsn}, 2, "--scope"},
		{[]string{"token", "create", "x", "--scope", "read"}, 2, "--db"},
		{[]string{"token", "list", "extra", "--db", dsn}, 2, "usage"},
		{[]string{"token", "frob"}, 2, "usage"},
		{[]string{"token"}, 2, "usage"},
	} {
		code, out, errOut := runCmd(t, nil, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		require.Empty(t, out, c.args)
		require.Contains(t, errOut, c.msg, c.args)
	}
	ts, err := db.Tokens(ctx)
	require.NoError(t, err)
	require.Len(t, ts, 2, "no failed command created anything")
}

// TestDBFlagHelpHidesTheDSN: the help of token and rules says where --db
// defaults from, never the DSN it would take from the environment (its
// password), and a database that cannot be opened is reported under --db
// with the password redacted.
func TestDBFlagHelpHidesTheDSN(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	env := envMap(map[string]string{"RATELIMITD_DB": "postgres://admin:s3cret@127.0.0.1:1/rules?connect_timeout=1"})
	for _, args := range [][]string{{"token", "list", "-h"}, {"token", "create", "-h"}, {"rules", "export", "-h"}} {
		var out, errOut bytes.Buffer
		code := run(ctx, args, &out, &errOut, env)
		require.Equal(t, 2, code, args)
		require.Contains(t, errOut.String(), "$RATELIMITD_DB", args)
		require.NotContains(t, errOut.String(), "s3cret", args)
	}
	for _, args := range [][]string{{"token", "list"}, {"rules", "export"}} {
		var out, errOut bytes.Buffer
		code := run(ctx, args, &out, &errOut, env)
		require.Equal(t, 1, code, args)
		require.Contains(t, errOut.String(), "--db: ", args)
		require.NotContains(t, errOut.String(), "s3cret", args)
	}
}
