package remotestore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/service/remotestore"
)

// Every Key the server receives is decided in the store API's namespace:
// a client's {alice, orders} never shares state with the server store's
// own {alice, orders} (a rule's counter), in Take, Refund, Reset,
// SetOverride and ClearOverride alike, and is the store's
// ServerKey({alice, orders}).
func TestServerKeyNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	backend := memory(t, nil)
	rs, _ := remote(t, backend)
	k := core.Key{Identity: "alice", Policy: "orders"}
	one := core.PerHour(1)

	r, err := limitertest.TakeOne(ctx, rs, k, one, 1)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	own, err := limitertest.TakeOne(ctx, backend, k, one, 1)
	require.NoError(t, err)
	require.True(t, own.Allowed, "the server's own key is not the client's")
	mapped, err := limitertest.TakeOne(ctx, backend, remotestore.ServerKey(k), one, 0)
	require.NoError(t, err)
	require.False(t, mapped.Allowed, "the client's key is ServerKey's")

	// The client resets, refunds, raises and clears its own key only.
	require.NoError(t, rs.Reset(ctx, k, one))
	require.NoError(t, rs.Refund(ctx, core.Admission{Key: k, Limit: one, Cost: 1, At: own.At}))
	require.NoError(t, backend.SetOverride(ctx, k, core.Override{Until: time.Now().Add(time.Hour)})) // the server blocks its key
	require.NoError(t, rs.ClearOverride(ctx, k))
	require.NoError(t, rs.SetOverride(ctx, k, core.Override{Limit: core.PerHour(1000), Until: time.Now().Add(time.Hour)}))
	own, err = limitertest.TakeOne(ctx, backend, k, one, 0)
	require.NoError(t, err)
	require.False(t, own.Allowed, "the server's block stays")
	require.Nil(t, own.Applied)
}

// ServerKey is injective and its policies are apart from every policy the
// server's own users of a store make (core.ValidatePolicyName's names,
// core's idempotency records "idem/..."), never hold a NUL, and keep the
// identity: over random keys of hostile bytes.
func TestServerKeyDisjoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("a:/_-.%~\x00{}#\xff")
	word := func() string {
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	seen := map[core.Key]core.Key{}
	for range 20000 {
		k := core.Key{Identity: word(), Policy: word()}
		m := remotestore.ServerKey(k)
		require.Equal(t, k.Identity, m.Identity)
		require.True(t, strings.HasPrefix(m.Policy, remotestore.PolicyPrefix), "%q", m.Policy)
		require.NotContains(t, m.Policy, "\x00")
		require.Error(t, core.ValidatePolicyName(m.Policy), "%q is a policy name", m.Policy)
		require.False(t, strings.HasPrefix(m.Policy, "idem/"))
		if prev, ok := seen[m]; ok {
			require.Equal(t, prev, k, "two keys share %q", m)
		}
		seen[m] = k
	}
}

// Target names a key in valid UTF-8, as it is when that is unambiguous,
// quoted otherwise, and cut with a digest when long; distinct keys get
// distinct targets.
func TestTarget(t *testing.T) {
	long := strings.Repeat("x", 300)
	for k, want := range map[core.Key]string{
		{Identity: "alice", Policy: "orders"}:       "store/alice/orders",
		{Identity: "alice"}:                         `store/alice/""`,
		{Identity: "a/b", Policy: "c"}:              `store/"a/b"/c`,
		{Identity: "a", Policy: "b/c"}:              `store/a/"b/c"`,
		{Identity: "nul\x00", Policy: "\xff"}:       `store/"nul\x00"/"\xff"`,
		{Identity: `"q"`, Policy: "é"}:              `store/"\"q\""/é`,
		{Identity: "token:ops", Policy: "a b"}:      "store/token:ops/a b",
		{Identity: "tab\t", Policy: "admin_write"}:  `store/"tab\t"/admin_write`,
		{Identity: long[:256], Policy: "p"}:         "store/" + long[:256] + "/p",
		{Identity: "{x}", Policy: "idem/abc/n"}:     `store/{x}/"idem/abc/n"`,
		{Identity: "\u2028", Policy: "\U0010FFFF"}:  `store/"\u2028"/"\U0010ffff"`,
		{Identity: "alice", Policy: "orders\u00a0"}: `store/alice/"orders\u00a0"`,
	} {
		got := remotestore.Target(k)
		require.Equal(t, want, got, "%q", k)
		require.True(t, utf8.ValidString(got))
	}
	a := remotestore.Target(core.Key{Identity: long, Policy: "p"})
	b := remotestore.Target(core.Key{Identity: long + "y", Policy: "p"})
	require.NotEqual(t, a, b)
	require.Contains(t, a, "(300 bytes, sha256 ")
	require.Less(t, len(a), 200)
}

// recorder is a Recorder that keeps what it records, and fails while fail
// is set (before applying: nothing is changed).
type recorder struct {
	mu      sync.Mutex
	changes []remotestore.Change
	fail    error
}

func (r *recorder) record(ctx context.Context, c remotestore.Change, apply func(context.Context) error) error {
	r.mu.Lock()
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		return fail
	}
	if err := apply(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
	return nil
}

// Reset, SetOverride and ClearOverride go through the Recorder, each once,
// named by action and the client's key; Take, TakeBatch and Refund do not.
// A Recorder that fails refuses the change (UNAVAILABLE, with no detail,
// nothing changed); bad input is refused before the Recorder is called.
func TestRecorder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := &recorder{}
	var logs logBuffer
	backend := memory(t, nil)
	rs, _ := remote(t, backend, remotestore.WithRecorder(rec.record), remotestore.WithLogger(logs.logger()))
	k := core.Key{Identity: "alice", Policy: "p"}
	l := core.PerHour(2)
	r, err := limitertest.TakeOne(ctx, rs, k, l, 1)
	require.NoError(t, err)
	require.NoError(t, rs.Refund(ctx, core.Admission{Key: k, Limit: l, Cost: 1, At: r.At}))
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	require.NoError(t, rs.Reset(ctx, k, l))
	require.NoError(t, rs.SetOverride(ctx, k, core.Override{Until: until}))
	require.NoError(t, rs.ClearOverride(ctx, k))
	require.Len(t, rec.changes, 3)
	for i, want := range []string{remotestore.ActionReset, remotestore.ActionOverrideSet, remotestore.ActionOverrideClear} {
		c := rec.changes[i]
		require.Equal(t, want, c.Action)
		require.Equal(t, k, c.Key)
		require.Equal(t, "store/alice/p", c.Target)
	}
	require.NotNil(t, rec.changes[0].After)
	require.NotNil(t, rec.changes[1].After)
	require.Nil(t, rec.changes[2].After)

	// Refused before recording: no identity, an invalid limit, an override
	// in the past.
	require.ErrorIs(t, rs.Reset(ctx, core.Key{Policy: "p"}, l), core.ErrNoKey)
	require.ErrorIs(t, rs.Reset(ctx, k, core.Limit{}), core.ErrInvalidLimit)
	require.ErrorIs(t, rs.SetOverride(ctx, k, core.Override{Until: time.Now().Add(-time.Second)}), core.ErrInvalidLimit)
	require.ErrorIs(t, rs.ClearOverride(ctx, core.Key{}), core.ErrNoKey)
	require.Len(t, rec.changes, 3)

	// A failing Recorder: refused, nothing changed, the cause only logged.
	rec.mu.Lock()
	rec.fail = errors.New("audit log on fire")
	rec.mu.Unlock()
	spent, err := limitertest.TakeOne(ctx, rs, k, l, 2)
	require.NoError(t, err)
	require.True(t, spent.Allowed)
	err = rs.Reset(ctx, k, l)
	require.ErrorIs(t, err, remotestore.ErrUnavailable)
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.NotContains(t, err.Error(), "fire")
	require.Contains(t, logs.String(), "audit log on fire")
	require.ErrorIs(t, rs.SetOverride(ctx, k, core.Override{Limit: core.PerHour(100), Until: until}), remotestore.ErrUnavailable)
	after, err := limitertest.TakeOne(ctx, rs, k, l, 0)
	require.NoError(t, err)
	require.False(t, after.Allowed, "neither reset nor raised")
	require.Len(t, rec.changes, 3)
}
