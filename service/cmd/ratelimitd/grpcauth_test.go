package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// grpcTokens makes a SQLite rules database with a write and a read token.
func grpcTokens(t *testing.T) (dsn, write, read string) {
	t.Helper()
	ctx := dbctx(t)
	dsn = "file:" + filepath.Join(t.TempDir(), "rules.db")
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	write, _, err = db.CreateToken(ctx, "cli:test", "ops", rulesdb.ScopeWrite)
	require.NoError(t, err)
	read, _, err = db.CreateToken(ctx, "cli:test", "viewer", rulesdb.ScopeRead)
	require.NoError(t, err)
	return dsn, write, read
}

// runCheck runs `ratelimitd check args...` (runCmd) with env as its only
// environment.
func runCheck(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, env, append([]string{"check"}, args...)...)
}

// `serve --db` guards ResetLimit and the store API with the database's
// tokens by default: no token is UNAUTHENTICATED, a read token
// PERMISSION_DENIED, a write token works (through the native client, the
// remote store and `ratelimitd check --reset --token`); checks need none.
// --grpc-auth=off turns the guard off.
func TestServeGRPCAuth(t *testing.T) {
	t.Parallel()
	dsn, write, read := grpcTokens(t)
	p := startServer(t, nil, "--db", dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := ratelimitv1.NewRateLimitServiceClient(p.Conn(t))
	_, err := client.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "ann", Endpoint: "/api/orders"})
	require.NoError(t, err, "a check needs no token")

	reset := &ratelimitv1.ResetRequest{Dimension: "user", Identifier: "ann", Endpoint: "/api/orders"}
	_, err = client.ResetLimit(ctx, reset)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	_, err = client.ResetLimit(ctx, reset, grpc.PerRPCCredentials(remotestore.InsecureTokenCredentials("slk_nope")))
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	_, err = client.ResetLimit(ctx, reset, grpc.PerRPCCredentials(remotestore.InsecureTokenCredentials(read)))
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	var header map[string][]string
	_, err = client.ResetLimit(ctx, reset, grpc.PerRPCCredentials(remotestore.InsecureTokenCredentials(write)), grpc.Header((*metadata.MD)(&header)))
	require.NoError(t, err)
	require.Equal(t, []string{`"admin_write";q=100;w=60`}, header["ratelimit-policy"], "counted against the token's admin writes")

	op := []core.Op{{Key: core.Key{Identity: "alice", Policy: "p"}, Limit: core.PerMinute(3), Cost: 1}}
	err = remotestore.New(p.Conn(t)).Take(ctx, op, make([]core.Result, 1))
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	res := make([]core.Result, 1)
	require.NoError(t, remotestore.New(p.Conn(t), remotestore.WithInsecureToken(write)).Take(ctx, op, res))
	require.True(t, res[0].Allowed)
	require.Equal(t, int64(2), res[0].Remaining)

	// The check command: --reset without a token is refused, with one
	// (flag or RATELIMITD_CHECK_TOKEN) it resets.
	args := []string{"--addr", p.GRPCAddr, "--identifier", "ann", "--endpoint", "/api/orders", "--reset"}
	code, _, errOut := runCheck(t, nil, args...)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "Unauthenticated")
	code, out, errOut := runCheck(t, nil, append(args, "--token", write)...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "reset user ann\n", out)
	code, _, errOut = runCheck(t, []string{"RATELIMITD_CHECK_TOKEN=" + write}, args...)
	require.Equal(t, 0, code, errOut)
	code, _, errOut = runCheck(t, []string{"RATELIMITD_CHECK_TOKEN=" + read}, args...)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "PermissionDenied")
	// Not to a remote address in plaintext: refused before dialling.
	code, _, errOut = runCheck(t, nil, "--addr", "192.0.2.1:8081", "--identifier", "ann", "--reset", "--token", write)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--token")
	require.NotContains(t, errOut, write)

	require.NoError(t, p.Close(), p.Logs())
	require.NotContains(t, p.Logs(), write)
	require.Contains(t, p.Logs(), `"grpc_auth":"admin"`)

	off := startServer(t, nil, "--db", dsn, "--grpc-auth", "off")
	_, err = ratelimitv1.NewRateLimitServiceClient(off.Conn(t)).ResetLimit(ctx, reset)
	require.NoError(t, err, "--grpc-auth=off: no token asked")
	require.NoError(t, remotestore.New(off.Conn(t)).Take(ctx, op, res))
}

// Over TLS the token goes with TokenCredentials (which need TLS) and
// `ratelimitd check --tls-ca --token` to any address.
func TestServeGRPCAuthTLS(t *testing.T) {
	t.Parallel()
	dsn, write, _ := grpcTokens(t)
	cert, key, _ := selfSigned(t, t.TempDir())
	p := startServer(t, map[string]string{"RATELIMITD_TLS_CERT": cert, "RATELIMITD_TLS_KEY": key}, "--db", dsn)
	args := []string{"--addr", p.GRPCAddr, "--tls-ca", cert, "--identifier", "ann", "--endpoint", "/api/orders", "--reset"}
	code, _, errOut := runCheck(t, nil, args...)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "Unauthenticated")
	code, out, errOut := runCheck(t, []string{"RATELIMITD_CHECK_TOKEN=" + write}, args...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "reset user ann\n", out)
}

// --grpc-auth is off or admin, and admin needs --db.
func TestServeGRPCAuthFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-auth", "admin"}, "--grpc-auth: admin needs --db"},
		{[]string{"--grpc-auth", "on"}, `--grpc-auth: want off or admin, got "on"`},
	} {
		code, _, errOut := runEnv(t, nil, append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tc.args...)...)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, tc.want)
	}
	code, _, errOut := runEnv(t, []string{"RATELIMITD_GRPC_AUTH=admin"}, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--grpc-auth: admin needs --db")
	code, out, _ := runEnv(t, nil, "serve", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, out, "--grpc-auth (env RATELIMITD_GRPC_AUTH")
}
