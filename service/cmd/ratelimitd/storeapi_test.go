package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// The limits of the service's own keys, as an attacker would pass them to
// reach those keys' state: a rule's (ordersRule(5)), the admin limiter's
// (adminauth: a sliding window counter of 100 a minute), and core's
// idempotency records and repeat counters (--idempotency-ttl 5m,
// --idempotency-repeats 3).
var (
	ruleLimit    = core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: time.Hour}
	adminLimit   = core.Limit{Algorithm: core.SlidingWindowCounter, Rate: 100, Period: time.Minute}
	idemLimit    = core.Limit{Algorithm: core.SlidingWindowLog, Rate: 1, Period: 5 * time.Minute}
	repeatsLimit = core.Limit{Algorithm: core.SlidingWindowLog, Rate: 3, Period: 5 * time.Minute}
)

// The victims of the store API attack: callers spent under the rule
// orders, one of them with a NUL and one longer than the Redis store's raw
// keys (hashed in its hash tag); a caller the database's override blocks;
// a caller with an idempotent check; a caller whose quota is untouched.
var (
	nulVictim  = "nul\x00victim"
	longVictim = strings.Repeat("L", 600)
)

// storeAttack is one ratelimitd serving --db, with an attacker holding a
// write token.
type storeAttack struct {
	p      *ratelimitdtest.Daemon
	db     *rulesdb.DB
	redis  redis.UniversalClient // nil on the memory store
	http   *http.Client
	native ratelimitv1.RateLimitServiceClient
	store  ratelimitv1.StoreServiceClient
	// tokens by name: victim-admin (its admin writes spent), bystander
	// (untouched), attacker.
	tokens map[string]string
	// calls are the attacker's admin calls that succeeded: request id ->
	// the audit row they must have left.
	calls map[string]rulesdb.AuditEntry
	seq   int
	// spent is when the victim's admin writes were spent.
	spent time.Time
}

// TestStoreAPICannotReachTheServiceKeys: an attacker with a write token
// sends every raw key shape of the service's own keys (the admin limiter's
// token:NAME under admin_write and admin_read, a rule's counter of a real
// caller, a NUL and a hashed long identifier, idempotency records, the key
// of an override the engine applied from the database, separators, braces,
// NULs, long keys) through Take, TakeBatch, Refund, Reset, SetOverride and
// ClearOverride, on memory, Redis and Redis Cluster (and PostgreSQL): a
// spent admin quota stays spent, a bystander's is untouched, the rule's
// counters are neither reset, raised nor spent, the engine's block stays,
// an idempotent repeat is still free; the store API's keys are namespaced
// in the identity's slot; every admin call leaves exactly one audit row
// (actor, action, target, request id); and the attacker cannot reset its
// own admin budget once spent.
func TestStoreAPICannotReachTheServiceKeys(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var idemKeys []core.Key // the real idempotency keys, found on Redis
	// On Redis, each finding the idempotency keys there, in parallel; then
	// on the memory store, with the keys found.
	t.Run("redis", func(t *testing.T) {
		for _, b := range []struct {
			name  string
			db    func(t *testing.T) string
			redis func(t *testing.T) (arg string, client redis.UniversalClient)
		}{
			{"single/sqlite", sqliteDSN, func(t *testing.T) (string, redis.UniversalClient) {
				s := redistest.StartServer(t)
				return "redis://" + s.Addr, s.Client(t)
			}},
			{"cluster/sqlite", sqliteDSN, func(t *testing.T) (string, redis.UniversalClient) {
				c := redistest.StartCluster(t, 3)
				return "redis-cluster://" + strings.Join(c.Addrs(), ","), c.Client(t)
			}},
			{"single/postgres", func(t *testing.T) string { return pg.NewDatabase(t) }, func(t *testing.T) (string, redis.UniversalClient) {
				s := redistest.StartServer(t)
				return "redis://" + s.Addr, s.Client(t)
			}},
		} {
			t.Run(b.name, func(t *testing.T) {
				t.Parallel()
				arg, client := b.redis(t)
				a := startStoreAttack(t, b.db(t), arg, client)
				a.spendVictims(t)
				keys := a.idempotencyKeys(t)
				require.Len(t, keys, 2, "the record and its repeat counter")
				mu.Lock()
				idemKeys = keys
				mu.Unlock()
				a.attackAndCheck(t, append(attackKeys(), keys...))
			})
		}
	})
	t.Run("memory/sqlite", func(t *testing.T) {
		a := startStoreAttack(t, sqliteDSN(t), "", nil)
		a.spendVictims(t)
		a.attackAndCheck(t, append(attackKeys(), idemKeys...))
	})
}

// attackAndCheck sends the attack with keys and checks that it changed
// nothing it must not, that every admin call of it was audited, and that
// the attacker cannot reset its own admin budget.
func (a *storeAttack) attackAndCheck(t *testing.T, keys []core.Key) {
	t.Helper()
	a.attack(t, keys)
	a.requireUntouched(t)
	a.requireAudited(t)
	if a.redis != nil {
		a.requireNamespaced(t)
	}
	a.requireOwnBudgetStaysSpent(t)
}

func sqliteDSN(t *testing.T) string { return "file:" + filepath.Join(t.TempDir(), "rules.db") }

// startStoreAttack fills the database (the rule orders, the block of vip,
// the tokens) and starts ratelimitd on it and on Redis (redisArg, or the
// memory store when "").
func startStoreAttack(t *testing.T, dsn, redisArg string, client redis.UniversalClient) *storeAttack {
	t.Helper()
	ctx := dbctx(t)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.Create(ctx, "cli:test", ordersRule(5))
	require.NoError(t, err)
	_, err = db.SetOverride(ctx, "cli:test", rulesdb.Override{Dimension: "user", Identifier: "vip", RuleID: "orders",
		Block: true, ExpiresAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	a := &storeAttack{db: db, redis: client, http: apiClient(t, &http.Client{Timeout: 10 * time.Second}),
		tokens: map[string]string{}, calls: map[string]rulesdb.AuditEntry{}}
	for _, name := range []string{"victim-admin", "bystander", "attacker"} {
		a.tokens[name], _, err = db.CreateToken(ctx, "cli:test", name, rulesdb.ScopeWrite)
		require.NoError(t, err)
	}
	// Generous bounds on the store's and the database's calls: a loaded
	// machine must not answer the attack, or the hundred writes at once,
	// by a timeout.
	args := []string{"--db", dsn, "--store-timeout", "2s", "--db-timeout", "30s"}
	if redisArg != "" {
		args = append(args, "--redis", redisArg)
	}
	a.p = startServer(t, nil, args...)
	conn := a.p.Conn(t)
	a.native = ratelimitv1.NewRateLimitServiceClient(conn)
	a.store = ratelimitv1.NewStoreServiceClient(conn)
	return a
}

// check decides one check of identifier on /api/orders/1 (cost 0: a peek).
func (a *storeAttack) check(t *testing.T, identifier string, cost int64, idemKey string) *ratelimitv1.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := a.native.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: identifier,
		Endpoint: "/api/orders/1", Cost: proto.Int64(cost), IdempotencyKey: idemKey})
	require.NoError(t, err)
	return r
}

// spendVictims spends the rule's counters of alice and of the NUL and long
// victims, makes bob's idempotent check, checks that vip is blocked and
// spends victim-admin's admin writes.
func (a *storeAttack) spendVictims(t *testing.T) {
	t.Helper()
	for _, id := range []string{"alice", nulVictim, longVictim} {
		for i := range 5 {
			require.True(t, a.check(t, id, 1, "").GetAllowed(), "%q check %d", id, i)
		}
		require.False(t, a.check(t, id, 1, "").GetAllowed(), "%q spent", id)
	}
	first := a.check(t, "bob", 1, "order-42")
	require.True(t, first.GetAllowed())
	require.EqualValues(t, 4, first.GetRemaining())
	again := a.check(t, "bob", 1, "order-42")
	require.True(t, again.GetAllowed())
	require.EqualValues(t, 4, again.GetRemaining(), "a repeat is free")
	require.False(t, a.check(t, "vip", 1, "").GetAllowed(), "the database's override blocks vip")

	var wg sync.WaitGroup
	codes := make([]int, 100)
	for i := range codes {
		wg.Go(func() {
			codes[i] = adminCall(t, a.http, a.p, a.tokens["victim-admin"], "POST", "/api/v1/rules", `{}`).status
		})
	}
	wg.Wait()
	for i, c := range codes {
		require.Equal(t, http.StatusBadRequest, c, "write %d", i)
	}
	a.requireAdminSpent(t, "victim-admin")
	a.spent = time.Now()
}

// requireAdminSpent checks that name's admin writes are spent: on the
// admin API and on gRPC.
func (a *storeAttack) requireAdminSpent(t *testing.T, name string) {
	t.Helper()
	r := adminCall(t, a.http, a.p, a.tokens[name], "POST", "/api/v1/rules", `{}`)
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s: %s", name, r.raw)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := a.native.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "user", Identifier: "nobody"}, a.creds(name))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%s: %v", name, err)
}

// requireStillSpent checks that name's admin writes, spent at a.spent,
// came back no faster than the sliding window counter frees them (one
// in every 600 ms of a 100-a-minute limit): the attack reset nothing.
// Under load the attack can outlast a free unit, so a write may pass.
func (a *storeAttack) requireStillSpent(t *testing.T, name string) {
	t.Helper()
	freed := int(time.Since(a.spent)/(time.Minute/100)) + 1
	r := adminCall(t, a.http, a.p, a.tokens[name], "POST", "/api/v1/rules", `{}`)
	if r.status == http.StatusTooManyRequests {
		return
	}
	require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", name, r.raw)
	left, err := strconv.Atoi(r.header.Get("X-RateLimit-Remaining"))
	require.NoError(t, err, r.raw)
	require.Less(t, left, freed, "%s: %d writes left %v after they were spent", name, left, time.Since(a.spent))
}

func (a *storeAttack) creds(name string) grpc.CallOption {
	return grpc.PerRPCCredentials(remotestore.InsecureTokenCredentials(a.tokens[name]))
}

// idempotencyKeys returns the keys of bob's idempotency record and repeat
// counter, read from Redis (core names them by a digest of the request).
func (a *storeAttack) idempotencyKeys(t *testing.T) []core.Key {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []core.Key
	add := func(ctx context.Context, c *redis.Client) error {
		names, err := c.Keys(ctx, "sluice:{bob}:idem/*").Result()
		for _, n := range names {
			policy := strings.TrimPrefix(n, "sluice:{bob}:")
			policy = policy[:strings.LastIndexByte(policy, ':')]
			keys = append(keys, core.Key{Identity: "bob", Policy: policy})
		}
		return err
	}
	var mu sync.Mutex
	if cc, ok := a.redis.(*redis.ClusterClient); ok {
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return add(ctx, c)
		}))
	} else {
		require.NoError(t, add(ctx, a.redis.(*redis.Client)))
	}
	return keys
}

// attackKeys are the raw key shapes the attacker sends.
func attackKeys() []core.Key {
	return []core.Key{
		{Identity: "token:victim-admin", Policy: "admin_write"},
		{Identity: "token:victim-admin", Policy: "admin_read"},
		{Identity: "token:bystander", Policy: "admin_write"},
		{Identity: "token:victim-admin", Policy: "admin_write\x00"},
		{Identity: "token:victim-admin\x00admin_write"},
		{Identity: "token", Policy: "victim-admin\x00admin_write"},
		{Identity: "alice", Policy: "orders"},
		{Identity: "bob", Policy: "orders"},
		{Identity: "vip", Policy: "orders"},
		{Identity: nulVictim, Policy: "orders"},
		{Identity: "nul", Policy: "victim\x00orders"},
		{Identity: longVictim, Policy: "orders"},
		{Identity: "alice", Policy: "orders/n"},
		{Identity: "bob", Policy: "idem/"},
		{Identity: "{alice}", Policy: "orders"},
		{Identity: "alice", Policy: "{orders}"},
		{Identity: "alice}:orders:fw", Policy: ""},
		{Identity: "alice", Policy: ""},
		{Identity: "alice", Policy: remotestore.PolicyPrefix + "orders"},
		{Identity: "alice", Policy: "orders" + strings.Repeat("%", 300)},
		{Identity: "\x00", Policy: "orders"},
	}
}

// limitFor is the limit the service keeps k's state under, as the
// attacker would guess it.
func limitFor(k core.Key) core.Limit {
	switch {
	case strings.HasPrefix(k.Identity, "token"):
		return adminLimit
	case strings.HasPrefix(k.Policy, "idem/") && strings.HasSuffix(k.Policy, "/n"):
		return repeatsLimit
	case strings.HasPrefix(k.Policy, "idem/"):
		return idemLimit
	}
	return ruleLimit
}

func wireLimit(l core.Limit) *ratelimitv1.StoreLimit {
	return &ratelimitv1.StoreLimit{Algorithm: ratelimitv1.StoreAlgorithm(l.Algorithm), Rate: l.Rate, Period: durationpb.New(l.Period), Burst: l.Burst}
}

// attack sends every key through every method of the store API: decisions
// that spend the key's whole capacity and forge refunds, then a Reset, a
// ClearOverride and a SetOverride raising the key's limit (left set).
func (a *storeAttack) attack(t *testing.T, keys []core.Key) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	atk := a.creds("attacker")
	for _, k := range keys {
		wk := &ratelimitv1.StoreKey{Identity: []byte(k.Identity), Policy: []byte(k.Policy)}
		l := limitFor(k)
		op := &ratelimitv1.StoreOp{Key: wk, Limit: wireLimit(l), Cost: l.Capacity()}
		tr, err := a.store.Take(ctx, &ratelimitv1.TakeRequest{Ops: []*ratelimitv1.StoreOp{op}}, atk)
		require.NoError(t, err, "%q", k)
		_, err = a.store.TakeBatch(ctx, &ratelimitv1.TakeBatchRequest{Takes: []*ratelimitv1.TakeRequest{{Ops: []*ratelimitv1.StoreOp{op}}}}, atk)
		require.NoError(t, err, "%q", k)
		now := time.Now().UnixMicro()
		for _, at := range []int64{tr.GetResults()[0].GetAt(), now, now - 1e6} {
			_, err = a.store.Refund(ctx, &ratelimitv1.RefundRequest{Key: wk, Limit: wireLimit(l), Cost: l.Capacity(), At: at}, atk)
			require.NoError(t, err, "%q", k)
		}
		raise := core.Limit{Algorithm: l.Algorithm, Rate: 1000 * l.Rate, Period: l.Period}
		a.admin(t, remotestore.ActionReset, k, func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := a.store.Reset(ctx, &ratelimitv1.StoreResetRequest{Key: wk, Limit: wireLimit(l)}, o...)
			return err
		})
		a.admin(t, remotestore.ActionOverrideClear, k, func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := a.store.ClearOverride(ctx, &ratelimitv1.ClearOverrideRequest{Key: wk}, o...)
			return err
		})
		a.admin(t, remotestore.ActionOverrideSet, k, func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := a.store.SetOverride(ctx, &ratelimitv1.SetOverrideRequest{Key: wk, Limit: wireLimit(raise),
				Until: timestamppb.New(time.Now().Add(time.Hour))}, o...)
			return err
		})
	}
	// ResetLimit under the admin limits' names: no rule has them.
	for _, rule := range []string{"admin_write", "admin_read"} {
		_, err := a.native.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "user", Identifier: "token:victim-admin", RuleId: rule}, atk)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	}
	// A real ResetLimit of a caller the attack does not watch: audited.
	a.call(t, rulesdb.ActionLimitReset, "limit/user/carol", func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := a.native.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "user", Identifier: "carol", Endpoint: "/api/orders/1"}, o...)
		return err
	})
}

// admin makes one admin call of the attacker's on k (it must succeed).
func (a *storeAttack) admin(t *testing.T, action string, k core.Key, do func(context.Context, ...grpc.CallOption) error) {
	t.Helper()
	a.call(t, action, remotestore.Target(k), do)
}

// call makes one admin call of the attacker's, with a request id of its
// own, and remembers the audit row it must leave.
func (a *storeAttack) call(t *testing.T, action, target string, do func(context.Context, ...grpc.CallOption) error) {
	t.Helper()
	a.seq++
	id := fmt.Sprintf("attack-%d", a.seq)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-request-id", id)
	var header metadata.MD
	require.NoError(t, do(ctx, a.creds("attacker"), grpc.Header(&header)), "%s %s", action, target)
	require.Equal(t, []string{id}, header.Get("x-request-id"))
	require.Equal(t, []string{`"admin_write";q=100;w=60`}, header.Get("ratelimit-policy"), "%s counts against the admin writes", action)
	a.calls[id] = rulesdb.AuditEntry{Actor: "attacker", Action: action, Target: target, RequestID: id}
}

// requireUntouched checks that the attack changed none of the service's
// own keys.
func (a *storeAttack) requireUntouched(t *testing.T) {
	t.Helper()
	a.requireStillSpent(t, "victim-admin")
	r := adminCall(t, a.http, a.p, a.tokens["bystander"], "POST", "/api/v1/rules", `{}`)
	require.Equal(t, http.StatusBadRequest, r.status, r.raw)
	require.Equal(t, "99", r.header.Get("X-RateLimit-Remaining"), "the bystander's admin writes were not spent")
	for _, id := range []string{"alice", nulVictim, longVictim} {
		peek := a.check(t, id, 0, "")
		require.EqualValues(t, 5, peek.GetLimit(), "%q: no override raised the rule", id)
		require.EqualValues(t, 0, peek.GetRemaining(), "%q: the rule's counter was not reset", id)
	}
	require.False(t, a.check(t, "vip", 1, "").GetAllowed(), "the engine's block of vip stays")
	repeat := a.check(t, "bob", 1, "order-42")
	require.True(t, repeat.GetAllowed())
	require.EqualValues(t, 4, repeat.GetRemaining(), "the repeat is still free: the record was not reset, nor its repeats spent")
	require.EqualValues(t, 4, a.check(t, "bob", 0, "").GetRemaining(), "bob's counter was not spent")
}

// requireAudited checks that every admin call of the attacker left exactly
// one audit row, and no other call any.
func (a *storeAttack) requireAudited(t *testing.T) {
	t.Helper()
	rows, _, err := a.db.AuditQuery(dbctx(t), rulesdb.AuditFilter{Actor: "attacker", Limit: 1000})
	require.NoError(t, err)
	seen := map[string]int{}
	for _, e := range rows {
		want, ok := a.calls[e.RequestID]
		require.True(t, ok, "an audit row of no successful call: %+v", e)
		seen[e.RequestID]++
		require.Equal(t, want, rulesdb.AuditEntry{Actor: e.Actor, Action: e.Action, Target: e.Target, RequestID: e.RequestID})
	}
	for id := range a.calls {
		require.Equal(t, 1, seen[id], "call %s: audit rows", id)
	}
	require.Len(t, rows, len(a.calls))
}

// requireNamespaced checks on Redis that the store API's keys (the
// overrides the attack left set) are in its namespace, in the slot of the
// identity as sent (NUL in a policy too).
func (a *storeAttack) requireNamespaced(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{
		"sluice:{alice}:~store/orders:ovr",
		"sluice:{nul}:~store/victim%2500orders:ovr", // the Redis store escapes "%" itself
		"sluice:{token:victim-admin}:~store/admin_write:ovr",
		"sluice:{token:victim-admin}:~store/admin_write%2500:ovr",
		"sluice:{vip}:~store/orders:ovr",
	} {
		n, err := a.redis.Exists(ctx, name).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "%s", name)
	}
}

// requireOwnBudgetStaysSpent: the attacker spends its own admin writes;
// then Reset, SetOverride and ClearOverride of its own limiter's key are
// refused (they count first), and Take and Refund do not bring it back.
func (a *storeAttack) requireOwnBudgetStaysSpent(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	atk := a.creds("attacker")
	for {
		r := adminCall(t, a.http, a.p, a.tokens["attacker"], "POST", "/api/v1/rules", `{}`)
		if r.status == http.StatusTooManyRequests {
			break
		}
		require.Equal(t, http.StatusBadRequest, r.status, r.raw)
	}
	own := &ratelimitv1.StoreKey{Identity: []byte("token:attacker"), Policy: []byte("admin_write")}
	_, err := a.store.Reset(ctx, &ratelimitv1.StoreResetRequest{Key: own, Limit: wireLimit(adminLimit)}, atk)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	_, err = a.store.SetOverride(ctx, &ratelimitv1.SetOverrideRequest{Key: own, Limit: wireLimit(core.PerMinute(100000)),
		Until: timestamppb.New(time.Now().Add(time.Hour))}, atk)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	_, err = a.store.ClearOverride(ctx, &ratelimitv1.ClearOverrideRequest{Key: own}, atk)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	_, err = a.store.Refund(ctx, &ratelimitv1.RefundRequest{Key: own, Limit: wireLimit(adminLimit), Cost: 100, At: time.Now().UnixMicro()}, atk)
	require.NoError(t, err)
	a.requireAdminSpent(t, "attacker")
	a.requireAudited(t) // the refused calls left no row
}
