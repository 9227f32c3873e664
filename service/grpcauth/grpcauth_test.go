package grpcauth_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/envoyrls"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/grpcauth"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rules"
	"github.com/sluicehq/sluice/service/rulesdb"
)

const testRules = `rules:
  - name: orders-per-user
    dimension: user
    endpoints: [/api/orders]
    algorithm: fixed_window
    rate: 2
    period: 1h
`

// tokens are the secrets of a test database: a write token, a read token
// and a revoked write token.
type tokens struct{ write, read, revoked string }

// newTokens makes a real SQLite file with the three tokens.
func newTokens(t testing.TB) (*rulesdb.DB, tokens) {
	t.Helper()
	ctx := context.Background()
	db, err := rulesdb.Open(ctx, "file:"+filepath.Join(t.TempDir(), "rules.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var tk tokens
	tk.write, _, err = db.CreateToken(ctx, "test", "ops", rulesdb.ScopeWrite)
	require.NoError(t, err)
	tk.read, _, err = db.CreateToken(ctx, "test", "viewer", rulesdb.ScopeRead)
	require.NoError(t, err)
	tk.revoked, _, err = db.CreateToken(ctx, "test", "old-ci", rulesdb.ScopeWrite)
	require.NoError(t, err)
	require.NoError(t, db.RevokeToken(ctx, "test", "old-ci"))
	return db, tk
}

// server is ratelimitd's gRPC front doors (native API, Envoy's, health,
// reflection, the store API) on one memory store, behind the interceptor.
type server struct {
	addr string
	conn *grpc.ClientConn // no credentials
}

func start(t testing.TB, store core.Store, auth func() *adminauth.Auth, o grpcauth.Options) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	eng, err := engine.New(ctx, store, rules.NewBytes("rules.yaml", []byte(testRules)))
	require.NoError(t, err)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ic, err := grpcauth.New(auth, o)
	require.NoError(t, err)
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	grpcapi.New(eng).Register(gs)
	envoyrls.New(eng).Register(gs)
	remotestore.NewServer(store).Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return &server{addr: lis.Addr().String(), conn: dial(t, lis.Addr().String())}
}

func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func memory(t testing.TB, opts ...memorystore.Option) *memorystore.Store {
	t.Helper()
	s, err := memorystore.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// fixture is a server whose Auth reads the tokens of a SQLite file.
func fixture(t *testing.T, o adminauth.Options) (*server, tokens) {
	t.Helper()
	db, tk := newTokens(t)
	store := memory(t)
	auth, err := adminauth.New(db, store, o)
	require.NoError(t, err)
	return start(t, store, func() *adminauth.Auth { return auth }, grpcauth.Options{}), tk
}

// withAuth returns ctx carrying value as the call's authorization metadata
// ("" none), and a bound on the call.
func withAuth(t *testing.T, value string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	if value == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", value)
}

func check(t *testing.T, s *server, who string) *ratelimitv1.CheckResponse {
	t.Helper()
	r, err := ratelimitv1.NewRateLimitServiceClient(s.conn).CheckRateLimit(withAuth(t, ""), &ratelimitv1.CheckRequest{
		Dimension: "user", Identifier: who, Endpoint: "/api/orders", Cost: proto.Int64(1),
	})
	require.NoError(t, err)
	return r
}

func reset(ctx context.Context, s *server, who string) (metadata.MD, metadata.MD, error) {
	var header, trailer metadata.MD
	_, err := ratelimitv1.NewRateLimitServiceClient(s.conn).ResetLimit(ctx,
		&ratelimitv1.ResetRequest{Dimension: "user", Identifier: who, Endpoint: "/api/orders"}, grpc.Header(&header), grpc.Trailer(&trailer))
	return header, trailer, err
}

func take(ctx context.Context, s *server, identity string) (*ratelimitv1.TakeResponse, error) {
	return ratelimitv1.NewStoreServiceClient(s.conn).Take(ctx, &ratelimitv1.TakeRequest{Ops: []*ratelimitv1.StoreOp{{
		Key:   &ratelimitv1.StoreKey{Identity: []byte(identity), Policy: []byte("p")},
		Limit: &ratelimitv1.StoreLimit{Algorithm: ratelimitv1.StoreAlgorithm_STORE_ALGORITHM_FIXED_WINDOW, Rate: 3, Period: durationpb.New(time.Hour)},
		Cost:  1,
	}}})
}

// No token, a malformed one, another scheme, an unknown and a revoked
// token all get one UNAUTHENTICATED answer on ResetLimit and on the store
// API, which never says whether the token exists; a read token is
// PERMISSION_DENIED. A refused call changes nothing: the counters spent
// before are still spent.
func TestRefused(t *testing.T) {
	s, tk := fixture(t, adminauth.Options{})
	check(t, s, "alice")
	require.False(t, check(t, s, "alice").GetRemaining() > 0)
	_, err := take(withAuth(t, "Bearer "+tk.write), s, "bob")
	require.NoError(t, err)

	unauthenticated := []struct{ name, value string }{
		{"none", ""},
		{"unknown", "Bearer slk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		{"revoked", "Bearer " + tk.revoked},
		{"basic scheme", "Basic " + tk.write},
		{"bare secret", tk.write},
		{"bad characters", "Bearer " + tk.write + "!"},
		{"too long", "Bearer " + strings.Repeat("a", 300)},
	}
	var messages []string
	for _, c := range unauthenticated {
		_, _, err := reset(withAuth(t, c.value), s, "alice")
		st := status.Convert(err)
		require.Equal(t, codes.Unauthenticated, st.Code(), c.name)
		require.Empty(t, st.Details(), c.name)
		messages = append(messages, st.Message())
		_, err = take(withAuth(t, c.value), s, "bob")
		st = status.Convert(err)
		require.Equal(t, codes.Unauthenticated, st.Code(), c.name)
		messages = append(messages, st.Message())
	}
	for _, m := range messages {
		require.Equal(t, messages[0], m, "every refusal reads the same")
		require.NotContains(t, strings.ToLower(m), "revoked")
		require.NotContains(t, strings.ToLower(m), "unknown")
		require.NotContains(t, m, "old-ci")
	}

	// Two authorization values are refused too, even when one is good.
	ctx := metadata.AppendToOutgoingContext(withAuth(t, "Bearer "+tk.write), "authorization", "Bearer "+tk.read)
	_, _, err = reset(ctx, s, "alice")
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	_, _, err = reset(withAuth(t, "Bearer "+tk.read), s, "alice")
	st := status.Convert(err)
	require.Equal(t, codes.PermissionDenied, st.Code())
	require.Contains(t, st.Message(), "scope is read")
	_, err = take(withAuth(t, "Bearer "+tk.read), s, "bob")
	require.Equal(t, codes.PermissionDenied, status.Code(err))

	// Nothing was reset and nothing taken by a refused call.
	require.False(t, check(t, s, "alice").GetAllowed())
	r, err := take(withAuth(t, "Bearer "+tk.write), s, "bob")
	require.NoError(t, err)
	require.Equal(t, int64(1), r.GetResults()[0].GetRemaining(), "one earlier take and this one")
}

// A write token resets (and the call carries the token's admin_write
// fields), and takes from the store.
func TestWriteToken(t *testing.T) {
	s, tk := fixture(t, adminauth.Options{})
	check(t, s, "alice")
	require.False(t, check(t, s, "alice").GetRemaining() > 0)
	header, _, err := reset(withAuth(t, "Bearer "+tk.write), s, "alice")
	require.NoError(t, err)
	require.Equal(t, []string{`"admin_write";q=100;w=60`}, header.Get("ratelimit-policy"))
	require.Equal(t, []string{"99"}, header.Get("x-ratelimit-remaining"))
	require.True(t, check(t, s, "alice").GetAllowed())
	require.Equal(t, int64(0), check(t, s, "alice").GetRemaining())

	for want := int64(2); want >= 0; want-- {
		r, err := take(withAuth(t, "bearer "+tk.write), s, "carol")
		require.NoError(t, err, "the scheme is read in any case")
		require.Equal(t, want, r.GetResults()[0].GetRemaining())
	}
}

// The decision plane, health and reflection need no token.
func TestOpenWithoutToken(t *testing.T) {
	s, _ := fixture(t, adminauth.Options{})
	ctx := withAuth(t, "")
	native := ratelimitv1.NewRateLimitServiceClient(s.conn)
	req := &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "dave", Endpoint: "/api/orders", Cost: proto.Int64(1)}
	r, err := native.CheckRateLimit(ctx, req)
	require.NoError(t, err)
	require.True(t, r.GetAllowed())
	r, err = native.GetRemainingQuota(ctx, req)
	require.NoError(t, err)
	require.Equal(t, int64(1), r.GetRemaining())
	_, err = native.Report(ctx, req)
	require.NoError(t, err)
	b, err := native.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: []*ratelimitv1.CheckRequest{req}})
	require.NoError(t, err)
	require.False(t, b.GetResults()[0].GetResponse().GetAllowed(), "two spent: the rule's limit")

	rls, err := rlsv3.NewRateLimitServiceClient(s.conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "dave"}}}},
	})
	require.NoError(t, err)
	require.NotNil(t, rls)

	h, err := healthpb.NewHealthClient(s.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.GetStatus())

	services := listServices(t, ctx, s.conn)
	require.Contains(t, services, "sluice.ratelimit.v1.StoreService")
}

// listServices asks server reflection (a stream) for the services.
func listServices(t *testing.T, ctx context.Context, conn *grpc.ClientConn) []string {
	t.Helper()
	names, err := tryListServices(ctx, conn)
	require.NoError(t, err)
	return names
}

func tryListServices(ctx context.Context, conn *grpc.ClientConn) ([]string, error) {
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	// A Send to a stream the server has ended is io.EOF; Recv has its
	// status.
	_ = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// ResetLimit counts against the token's admin_write limit: past it the
// call is RESOURCE_EXHAUSTED with RetryInfo and the pushback trailer, and
// resets nothing. The store API is not counted: its Takes go on.
func TestAdminLimit(t *testing.T) {
	s, tk := fixture(t, adminauth.Options{WritesPerMinute: 2})
	ctx := withAuth(t, "Bearer "+tk.write)
	for range 2 {
		_, _, err := reset(ctx, s, "alice")
		require.NoError(t, err)
	}
	check(t, s, "alice")
	check(t, s, "alice")
	_, trailer, err := reset(ctx, s, "alice")
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	require.Contains(t, st.Message(), "admin_write")
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	require.NotNil(t, retry, "RetryInfo")
	require.Positive(t, retry.GetRetryDelay().AsDuration())
	require.LessOrEqual(t, retry.GetRetryDelay().AsDuration(), 2*time.Minute+time.Second, "a sliding window of one minute")
	require.NotEmpty(t, trailer.Get("grpc-retry-pushback-ms"))
	require.Equal(t, []string{"0"}, trailer.Get("x-ratelimit-remaining"))
	require.False(t, check(t, s, "alice").GetAllowed(), "the refused reset reset nothing")

	for i := range 10 {
		_, err := take(ctx, s, "erin")
		require.NoError(t, err, "take %d: the store API is not counted against the admin limit", i)
	}
}

// A failing rate-limit store fails the admin call closed, UNAVAILABLE
// with no store text; the store API's calls are not counted and go on.
// Before the database is reached (auth returns nil), every guarded call
// is UNAVAILABLE and open calls are served.
func TestFailClosed(t *testing.T) {
	db, tk := newTokens(t)
	broken := memory(t)
	auth, err := adminauth.New(db, broken, adminauth.Options{})
	require.NoError(t, err)
	require.NoError(t, broken.Close())
	s := start(t, memory(t), func() *adminauth.Auth { return auth }, grpcauth.Options{})
	_, _, err = reset(withAuth(t, "Bearer "+tk.write), s, "alice")
	st := status.Convert(err)
	require.Equal(t, codes.Unavailable, st.Code())
	require.Equal(t, "the rate limit could not be checked; retry later", st.Message())
	_, err = take(withAuth(t, "Bearer "+tk.write), s, "bob")
	require.NoError(t, err)

	s = start(t, memory(t), func() *adminauth.Auth { return nil }, grpcauth.Options{})
	_, _, err = reset(withAuth(t, "Bearer "+tk.write), s, "alice")
	require.Equal(t, codes.Unavailable, status.Code(err))
	_, err = take(withAuth(t, "Bearer "+tk.write), s, "bob")
	require.Equal(t, codes.Unavailable, status.Code(err))
	_, _, err = reset(withAuth(t, ""), s, "alice")
	require.Equal(t, codes.Unauthenticated, status.Code(err), "no token: refused before the database is asked")
	require.True(t, check(t, s, "alice").GetAllowed())
}

// A streaming method marked Token is checked when the stream starts.
func TestStream(t *testing.T) {
	db, tk := newTokens(t)
	store := memory(t)
	auth, err := adminauth.New(db, store, adminauth.Options{})
	require.NoError(t, err)
	s := start(t, store, func() *adminauth.Auth { return auth }, grpcauth.Options{Access: func(m string) grpcauth.Access {
		if strings.HasPrefix(m, "/grpc.reflection.") {
			return grpcauth.Token
		}
		return grpcauth.Ratelimitd(m)
	}})
	_, err = tryListServices(withAuth(t, ""), s.conn)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	_, err = tryListServices(withAuth(t, "Bearer "+tk.read), s.conn)
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	names, err := tryListServices(withAuth(t, "Bearer "+tk.write), s.conn)
	require.NoError(t, err)
	require.Contains(t, names, grpcapi.ServiceName)
}

// The remote store through the interceptor: with its token (sent in
// plaintext on purpose over loopback) it passes the conformance suite;
// without one it gets UNAUTHENTICATED; and TokenCredentials, which need
// TLS, refuse to send the token over a plaintext connection at all.
func TestRemoteStore(t *testing.T) {
	db, tk := newTokens(t)
	authStore := memory(t)
	// The store's admin changes (Reset, SetOverride, ClearOverride) count
	// against the token's admin writes; the conformance suite makes
	// thousands, and the budget is not what it tests.
	auth, err := adminauth.New(db, authStore, adminauth.Options{WritesPerMinute: 1_000_000})
	require.NoError(t, err)
	provide := func() *adminauth.Auth { return auth }

	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		s := start(t, memory(t, memorystore.WithClock(clock)), provide, grpcauth.Options{})
		return remotestore.New(dial(t, s.addr), remotestore.WithInsecureToken(tk.write))
	})

	s := start(t, memory(t), provide, grpcauth.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := core.PerMinute(5)
	_, err = limitertest.TakeOne(ctx, remotestore.New(s.conn), limitertest.Key(t), l, 1)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	_, err = limitertest.TakeOne(ctx, remotestore.New(s.conn, remotestore.WithToken(tk.write)), limitertest.Key(t), l, 1)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.ErrorContains(t, err, "insecure connection", "refused on the client: the token was not sent")
	r, err := limitertest.TakeOne(ctx, remotestore.New(s.conn, remotestore.WithInsecureToken(tk.write)), limitertest.Key(t), l, 1)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	_, err = limitertest.TakeOne(ctx, remotestore.New(s.conn, remotestore.WithInsecureToken(tk.read)), limitertest.Key(t), l, 1)
	require.Equal(t, codes.PermissionDenied, status.Code(err))

	// With the token on the connection instead of the Store.
	conn := dial(t, s.addr, grpc.WithPerRPCCredentials(remotestore.InsecureTokenCredentials(tk.write)))
	r, err = limitertest.TakeOne(ctx, remotestore.New(conn), limitertest.Key(t), l, 1)
	require.NoError(t, err)
	require.True(t, r.Allowed)
}

// Authentication goes through the Auth's cache: a token revoked after use
// keeps working until its cached result expires (the documented bound),
// then is UNAUTHENTICATED like any unknown token.
func TestRevocationAfterCache(t *testing.T) {
	db, tk := newTokens(t)
	store := memory(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	auth, err := adminauth.New(db, store, adminauth.Options{CacheTTL: 5 * time.Second, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	require.NoError(t, err)
	s := start(t, store, func() *adminauth.Auth { return auth }, grpcauth.Options{})
	ctx := withAuth(t, "Bearer "+tk.write)
	_, err = take(ctx, s, "bob")
	require.NoError(t, err)
	require.NoError(t, db.RevokeToken(context.Background(), "test", "ops"))
	_, err = take(ctx, s, "bob")
	require.NoError(t, err, "cached for the TTL")
	now.Add(int64(5*time.Second + time.Millisecond))
	_, err = take(ctx, s, "bob")
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	_, _, err = reset(ctx, s, "bob")
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}

// A client guessing secrets over gRPC is bounded as on the admin API:
// past its failed-authentication budget an unknown secret is
// RESOURCE_EXHAUSTED without a database lookup (the database closed by
// then: never UNAVAILABLE), while a token in the cache still passes.
func TestFailedAuthenticationsBounded(t *testing.T) {
	db, tk := newTokens(t)
	store := memory(t)
	auth, err := adminauth.New(db, store, adminauth.Options{CacheTTL: time.Hour})
	require.NoError(t, err)
	s := start(t, store, func() *adminauth.Auth { return auth }, grpcauth.Options{})
	_, err = take(withAuth(t, "Bearer "+tk.write), s, "bob") // now in the cache
	require.NoError(t, err)

	refused := 0
	for i := range 60 {
		_, err := take(withAuth(t, fmt.Sprintf("Bearer slk_guess%040d", i)), s, "bob")
		if status.Code(err) == codes.ResourceExhausted {
			refused = i
			break
		}
		require.Equal(t, codes.Unauthenticated, status.Code(err), "guess %d", i)
	}
	require.Positive(t, refused, "the guesses must be bounded")
	require.LessOrEqual(t, refused, 21)

	require.NoError(t, db.Close())
	_, err = take(withAuth(t, "Bearer slk_another"), s, "bob")
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "no lookup: the closed database is not asked")
	_, err = take(withAuth(t, "Bearer "+tk.write), s, "bob")
	require.NoError(t, err, "a cached token still passes")
}

// Ratelimitd's table: the changes an admin makes are Admin (ResetLimit,
// the store API's Reset, SetOverride, ClearOverride and any store method
// added later), the store API's decisions Token, the rest Open.
func TestRatelimitdTable(t *testing.T) {
	for method, want := range map[string]grpcauth.Access{
		grpcauth.MethodResetLimit:                                      grpcauth.Admin,
		grpcauth.StoreServicePrefix + "Reset":                          grpcauth.Admin,
		grpcauth.StoreServicePrefix + "SetOverride":                    grpcauth.Admin,
		grpcauth.StoreServicePrefix + "ClearOverride":                  grpcauth.Admin,
		grpcauth.StoreServicePrefix + "SomethingNew":                   grpcauth.Admin,
		grpcauth.StoreServicePrefix + "Take":                           grpcauth.Token,
		grpcauth.StoreServicePrefix + "TakeBatch":                      grpcauth.Token,
		grpcauth.StoreServicePrefix + "Refund":                         grpcauth.Token,
		"/sluice.ratelimit.v1.RateLimitService/CheckRateLimit":         grpcauth.Open,
		"/sluice.ratelimit.v1.RateLimitService/Report":                 grpcauth.Open,
		"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit": grpcauth.Open,
	} {
		require.Equal(t, want, grpcauth.Ratelimitd(method), method)
	}
}

// An Admin call reaches its handler with its token's Principal and its
// request id (the client's when valid, else a new one, sent back in the
// header), and counts against the token's admin writes; a Token call
// (Take) is not counted. The store API's Reset, SetOverride and
// ClearOverride are Admin: a token whose admin writes are spent cannot
// make them, and so cannot reset its own admin limit.
func TestAdminCallContext(t *testing.T) {
	db, tk := newTokens(t)
	store := memory(t)
	auth, err := adminauth.New(db, store, adminauth.Options{WritesPerMinute: 3})
	require.NoError(t, err)
	ic, err := grpcauth.New(func() *adminauth.Auth { return auth }, grpcauth.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	type seen struct {
		p  adminauth.Principal
		id string
	}
	got := make(chan seen, 10)
	rec := func(ctx context.Context, _ remotestore.Change, apply func(context.Context) error) error {
		p, _ := adminauth.PrincipalFrom(ctx)
		got <- seen{p, rulesdb.RequestID(ctx)}
		return apply(ctx)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()))
	remotestore.NewServer(store, remotestore.WithRecorder(rec)).Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	client := ratelimitv1.NewStoreServiceClient(dial(t, lis.Addr().String()))
	key := &ratelimitv1.StoreKey{Identity: []byte("alice"), Policy: []byte("p")}
	limit := &ratelimitv1.StoreLimit{Algorithm: ratelimitv1.StoreAlgorithm_STORE_ALGORITHM_FIXED_WINDOW, Rate: 3, Period: durationpb.New(time.Hour)}
	resetCall := func(ctx context.Context) (metadata.MD, error) {
		var header metadata.MD
		_, err := client.Reset(ctx, &ratelimitv1.StoreResetRequest{Key: key, Limit: limit}, grpc.Header(&header))
		return header, err
	}

	header, err := resetCall(metadata.AppendToOutgoingContext(withAuth(t, "Bearer "+tk.write), "x-request-id", "req-1"))
	require.NoError(t, err)
	require.Equal(t, seen{adminauth.Principal{Name: "ops", Scope: rulesdb.ScopeWrite}, "req-1"}, <-got)
	require.Equal(t, []string{"req-1"}, header.Get(grpcauth.MetadataRequestID))
	require.Equal(t, []string{"2"}, header.Get("x-ratelimit-remaining"))

	header, err = resetCall(metadata.AppendToOutgoingContext(withAuth(t, "Bearer "+tk.write), "x-request-id", "bad id!"))
	require.NoError(t, err)
	s := <-got
	require.Len(t, s.id, 32, "an invalid id is replaced")
	require.Equal(t, []string{s.id}, header.Get(grpcauth.MetadataRequestID))

	for range 5 {
		_, err = client.Take(withAuth(t, "Bearer "+tk.write), &ratelimitv1.TakeRequest{Ops: []*ratelimitv1.StoreOp{{Key: key, Limit: limit}}})
		require.NoError(t, err, "Take is not counted")
	}
	_, err = client.ClearOverride(withAuth(t, "Bearer "+tk.write), &ratelimitv1.ClearOverrideRequest{Key: key})
	require.NoError(t, err)
	<-got
	own := &ratelimitv1.StoreKey{Identity: []byte("token:ops"), Policy: []byte(adminauth.PolicyWrite)}
	_, err = client.Reset(withAuth(t, "Bearer "+tk.write), &ratelimitv1.StoreResetRequest{Key: own, Limit: limit})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "the fourth admin write in the minute")
	_, err = client.SetOverride(withAuth(t, "Bearer "+tk.write), &ratelimitv1.SetOverrideRequest{Key: own})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Empty(t, got, "a refused call never reaches the store")
}
