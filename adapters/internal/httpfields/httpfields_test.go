package httpfields_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/internal/httpfields"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// fixture is a memory store on a clock the test sets.
type fixture struct {
	mu    sync.Mutex
	now   time.Time
	store *memorystore.Store
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s, err := memorystore.New(memorystore.WithClock(func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	f.store = s
	return f
}

func (f *fixture) limiter(t *testing.T, opts []core.LimiterOption, ps ...core.Policy) *core.Limiter {
	l, err := core.NewLimiter(f.store, ps, opts...)
	require.NoError(t, err)
	return l
}

// formatter is the Formatter an adapter builds for c.
func formatter(c ratelimitfields.Config) *fieldfmt.Formatter {
	return fieldfmt.NewFormatter(fieldfmt.Config{Omit: uint8(c.Omit), Reset: uint8(c.Reset)})
}

// formatterConfigs are the header configurations the Formatter tests use.
var formatterConfigs = []ratelimitfields.Config{
	{},
	{Reset: ratelimitfields.ResetDelta},
	{Omit: ratelimitfields.Draft | ratelimitfields.State},
	{Omit: ratelimitfields.XRateLimit},
	{Omit: ratelimitfields.RetryAfter | ratelimitfields.State},
	{Omit: ratelimitfields.Draft | ratelimitfields.XRateLimit | ratelimitfields.State | ratelimitfields.RetryAfter},
}

// A Formatter, warm or cold, writes exactly what ratelimitfields.Config.Format does,
// through SetHeaders (into a Scratch, several times over) and Append, for
// decisions of every shape: one policy from normal to throttled, several
// with a shadow, a name too long for the Scratch, limits that change under
// a policy (overrides, tiers) and a cost that can never pass. Header values
// set earlier never change.
func TestFormatterWritesWhatFormatWrites(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ip := keyfunc.IP()
	long := strings.Repeat("n", 64)
	tiering := core.Tiering{
		Key: keyfunc.Header("X-Tier"),
		Resolve: func(_ context.Context, id string) (string, error) {
			if id == "err" {
				return "", errors.New("down")
			}
			return id, nil
		},
	}
	// More limits under one policy than the Formatter's cache has slots, so
	// that some share a slot: the same capacity over other windows (tiers),
	// other capacities over the same window (overrides).
	tiers := map[string]core.Limit{"free": core.PerMinute(2), "gold": core.PerMinute(50), "window": core.PerMinute(7).WithAlgorithm(core.FixedWindow)}
	var many []string
	for i := range 80 {
		name := fmt.Sprintf("t%d", i)
		tiers[name] = core.Per(10, time.Duration(i+1)*time.Minute)
		many = append(many, name)
	}
	limiters := map[string]*core.Limiter{
		"one":     f.limiter(t, nil, core.Policy{Name: "per-ip", Key: ip, Limit: core.PerMinute(10)}),
		"several": f.limiter(t, nil, core.Policy{Name: "api", Key: ip, Limit: core.PerMinute(6)}, core.Policy{Name: "trial", Key: ip, Limit: core.PerMinute(2), Shadow: true}, core.Policy{Name: "burst", Key: ip, Limit: core.PerSecond(4).WithBurst(5)}),
		"long":    f.limiter(t, nil, core.Policy{Name: long, Key: ip, Limit: core.Per(999_999_999, time.Second)}, core.Policy{Name: long[:63], Key: ip, Limit: core.PerHour(1_000_000_000)}),
		"shadow":  f.limiter(t, nil, core.Policy{Name: "s", Key: ip, Limit: core.PerMinute(1), Shadow: true}),
		"tiers": f.limiter(t, []core.LimiterOption{core.WithTiering(tiering)}, core.Policy{
			Name: "tiered", Key: ip, Limit: core.PerMinute(5),
			Tiers: tiers,
		}),
	}
	require.NoError(t, limiters["one"].SetOverride(ctx, "per-ip", "192.0.2.99", core.PerMinute(3), f.now.Add(time.Hour)))
	for i := range 80 {
		require.NoError(t, limiters["one"].SetOverride(ctx, "per-ip", fmt.Sprintf("198.51.100.%d", i), core.PerMinute(int64(20+i)), f.now.Add(time.Hour)))
	}

	warm := make([]*fieldfmt.Formatter, len(formatterConfigs))
	for i, c := range formatterConfigs {
		warm[i] = formatter(c)
	}
	type kept struct {
		h    http.Header
		want map[string]string
	}
	var all []kept
	check := func(l *core.Limiter, r keyfunc.Request, cost int64) {
		t.Helper()
		s := new(httpfields.Scratch)
		require.NoError(t, l.Decide(ctx, r, core.Call{Cost: cost}, &s.Decision))
		now := f.now.Add(time.Duration(len(all)) * 123457 * time.Microsecond)
		for i, c := range formatterConfigs {
			want := c.Format(&s.Decision, now)
			for _, fm := range []*fieldfmt.Formatter{warm[i], formatter(c)} {
				require.Equal(t, fieldfmt.Config{Omit: uint8(c.Omit), Reset: uint8(c.Reset)}, fm.Config())
				got, _ := fm.Append(nil, &s.Decision, now)
				requireSameFields(t, want, got)
				var buf [8]byte
				got, out := fm.Append(buf[:3], &s.Decision, now)
				requireSameFields(t, want, got, "appended after 3 bytes of a small buffer")
				require.GreaterOrEqual(t, len(out), 3)

				h := http.Header{"Other": {"x"}}
				s.SetHeaders(fm, h, now)
				k := kept{h: h, want: map[string]string{"Other": "x"}}
				for j := range want.N {
					k.want[http.CanonicalHeaderKey(want.Field[j].String())] = strings.Clone(want.Value[j])
				}
				all = append(all, k)
			}
		}
	}
	peer := func(addr string, hdr ...string) keyfunc.Request {
		r := &keyfunc.Static{Remote: addr, Headers: map[string][]string{}}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Headers[hdr[i]] = append(r.Headers[hdr[i]], hdr[i+1])
		}
		return r
	}
	for range 12 {
		check(limiters["one"], peer("192.0.2.1:1"), 1)
		check(limiters["one"], peer("192.0.2.99:1"), 1) // overridden: another capacity, same policy
		check(limiters["several"], peer("192.0.2.2:1"), 1)
		check(limiters["long"], peer("192.0.2.3:1"), 1)
		check(limiters["shadow"], peer("192.0.2.4:1"), 1)
		for _, tier := range []string{"free", "gold", "window", "none", "err"} {
			check(limiters["tiers"], peer("192.0.2.5:1", "X-Tier", tier), 1)
		}
	}
	for range 2 {
		for i := range 80 {
			check(limiters["one"], peer(fmt.Sprintf("198.51.100.%d:1", i)), 1)
			check(limiters["tiers"], peer("192.0.2.8:1", "X-Tier", many[i]), 0)
		}
	}
	check(limiters["one"], peer("192.0.2.6:1"), 11) // can never pass: no Retry-After
	check(limiters["several"], peer("192.0.2.7:1"), 0)
	for i, k := range all {
		require.Len(t, k.h, len(k.want), "response %d", i)
		for name, v := range k.want {
			require.Equal(t, []string{v}, k.h[name], "response %d, %s", i, name)
		}
	}
}

// requireSameFields requires that the Formatter's fields got are want.
func requireSameFields(t *testing.T, want ratelimitfields.Fields, got fieldfmt.Fields, msg ...any) {
	t.Helper()
	require.Equal(t, want.N, got.N, msg...)
	for i := range want.N {
		require.Equal(t, uint8(want.Field[i]), got.ID[i], msg...)
		require.Equal(t, want.Value[i], got.Value[i], msg...)
	}
}

type ctxKey string

// The Scratch's context carries its Decision and behaves as its parent
// otherwise: values, deadline, cancellation. Its request is a copy; the
// original is left alone.
func TestScratchContextAndRequest(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxKey("k"), "v"))
	s := new(httpfields.Scratch)
	r := httptest.NewRequestWithContext(parent, http.MethodPost, "/x?y=1", nil)
	r2 := s.Request(r)
	require.NotSame(t, r, r2)
	require.Equal(t, parent, r.Context(), "the original request keeps its context")
	_, found := httpfields.DecisionFrom(r.Context())
	require.False(t, found)
	require.Equal(t, r.Method, r2.Method)
	require.Equal(t, r.URL, r2.URL)

	ctx := r2.Context()
	d, found := httpfields.DecisionFrom(ctx)
	require.True(t, found)
	require.Same(t, &s.Decision, d)
	require.Equal(t, "v", ctx.Value(ctxKey("k")))
	require.Nil(t, ctx.Value(ctxKey("other")))
	_, hasDeadline := ctx.Deadline()
	require.False(t, hasDeadline)
	require.Contains(t, ctx.(interface{ String() string }).String(), "httplimit")

	child, stop := context.WithCancel(ctx)
	defer stop()
	d, found = httpfields.DecisionFrom(child)
	require.True(t, found)
	require.Same(t, &s.Decision, d)
	require.NoError(t, ctx.Err())
	cause := errors.New("client gone")
	cancel(cause)
	<-child.Done()
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(child), cause)

	s2 := new(httpfields.Scratch)
	d, found = httpfields.DecisionFrom(s2.Context(context.Background()))
	require.True(t, found)
	require.Same(t, &s2.Decision, d)
}
