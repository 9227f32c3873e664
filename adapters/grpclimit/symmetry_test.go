package grpclimit_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// layer is one server interceptor of a chain: its limiter and options.
type layer struct {
	lim  *core.Limiter
	opts []grpclimit.Option
}

// symCase is a configuration and the calls made under it, each call's
// metadata as pairs.
type symCase struct {
	name string
	// layers builds the interceptors, on stores of their own: it is called
	// once for the unary server and once for the stream server.
	layers     func(t *testing.T) []layer
	calls      [][]string
	fail       bool // the handlers fail (codes.Internal)
	sendHeader bool // the handlers send the header themselves first
}

// standingStore is a memory store on a clock that stands still, so that
// two servers given the same calls decide them alike to the microsecond.
func standingStore(t *testing.T) core.Store {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	s, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// downGuard is a guard over a store whose backend is down, with opts
// (its failure policy).
func downGuard(t *testing.T, opts ...guard.Option) core.Store {
	down := &adaptertest.FlakyStore{Store: standingStore(t)}
	down.Down.Store(true)
	g, err := guard.New(down, append(opts, guard.WithLogger(slog.New(slog.DiscardHandler)))...)
	require.NoError(t, err)
	return g
}

func times(n int, md ...string) [][]string {
	calls := make([][]string, n)
	for i := range calls {
		calls[i] = md
	}
	return calls
}

// one is a single layer of one policy p (named "p" unless it has a name)
// of l keyed by key (the peer's IP if nil) on store, with the delta reset
// format and opts.
func one(t *testing.T, store core.Store, l core.Limit, key keyfunc.Func, p core.Policy, opts ...grpclimit.Option) []layer {
	if key == nil {
		key = keyfunc.IP()
	}
	if p.Name == "" {
		p.Name = "p"
	}
	p.Key, p.Limit = key, l
	lim, err := core.NewLimiter(store, []core.Policy{p})
	require.NoError(t, err)
	return []layer{{lim, append([]grpclimit.Option{grpclimit.WithHeaders(deltaHeaders), grpclimit.WithLogger(slog.New(slog.DiscardHandler))}, opts...)}}
}

var panicKey = grpclimit.WithKey(func(keyfunc.Request) (string, error) { panic("boom") })

var symCases = []symCase{
	{name: "admitted then denied", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(3), nil, core.Policy{})
	}, calls: times(5)},
	{name: "warning state", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerMinute(10), nil, core.Policy{})
	}, calls: times(11)},
	{name: "cost beyond the capacity", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{},
			grpclimit.WithCost(func(context.Context, string, any) int64 { return 3 }))
	}, calls: times(2)},
	{name: "missing identity", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), keyfunc.Header("x-api-key"), core.Policy{MissingKey: core.DenyRequest})
	}, calls: [][]string{nil, {"x-api-key", "k"}, {"x-api-key", "k"}, {"x-api-key", "k"}}},
	{name: "refund of failed calls", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{Refund: core.RefundFailed})
	}, calls: times(4), fail: true},
	{name: "handler fails", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{})
	}, calls: times(3), fail: true},
	{name: "handler sent the header", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{})
	}, calls: times(3), sendHeader: true},
	{name: "handler sent the header and failed", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{})
	}, calls: times(3), sendHeader: true, fail: true},
	{name: "degraded: guard fails open", layers: func(t *testing.T) []layer {
		return one(t, downGuard(t, guard.WithFailOpen()), core.PerHour(2), nil, core.Policy{})
	}, calls: times(3)},
	{name: "degraded: guard fails closed", layers: func(t *testing.T) []layer {
		return one(t, downGuard(t, guard.WithFailClosed(3*time.Second)), core.PerHour(2), nil, core.Policy{})
	}, calls: times(2)},
	{name: "degraded and gone", layers: func(t *testing.T) []layer {
		return one(t, downGuard(t, guard.WithFailOpen()), core.PerHour(2), nil, core.Policy{})
	}, calls: times(2, "x-gone", "1")},
	{name: "gone, store healthy", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{})
	}, calls: times(3, "x-gone", "1")},
	{name: "store down, fail open", layers: func(t *testing.T) []layer {
		return one(t, downStoreT(t), core.PerHour(2), nil, core.Policy{})
	}, calls: times(2)},
	{name: "store down, FailClosed", layers: func(t *testing.T) []layer {
		return one(t, downStoreT(t), core.PerHour(2), nil, core.Policy{}, grpclimit.WithErrorHandler(grpclimit.FailClosed))
	}, calls: times(2)},
	{name: "store down and gone", layers: func(t *testing.T) []layer {
		return one(t, downStoreT(t), core.PerHour(2), nil, core.Policy{})
	}, calls: times(2, "x-gone", "1")},
	{name: "panicking key, fail open", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{}, panicKey)
	}, calls: times(2)},
	{name: "panicking key, FailClosed", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{}, panicKey, grpclimit.WithErrorHandler(grpclimit.FailClosed))
	}, calls: times(2)},
	{name: "panicking key, denying policy", layers: func(t *testing.T) []layer {
		panics := func(keyfunc.Request) (string, error) { panic("boom") }
		return one(t, standingStore(t), core.PerHour(2), panics, core.Policy{MissingKey: core.DenyRequest})
	}, calls: times(2)},
	{name: "panicking cost", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{}, grpclimit.WithErrorHandler(grpclimit.FailClosed),
			grpclimit.WithCost(func(context.Context, string, any) int64 { panic("boom") }))
	}, calls: times(2)},
	{name: "panicking skip", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(2), nil, core.Policy{}, grpclimit.WithErrorHandler(grpclimit.FailClosed),
			grpclimit.WithSkip(func(context.Context, string) bool { panic("boom") }))
	}, calls: times(2)},
	{name: "skipped", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(1), nil, core.Policy{},
			grpclimit.WithSkip(func(ctx context.Context, _ string) bool { return incoming(ctx, "x-skip") != "" }))
	}, calls: [][]string{{"x-skip", "1"}, {"x-skip", "1"}, nil, nil}},
	{name: "no policy applies", layers: func(t *testing.T) []layer {
		return one(t, standingStore(t), core.PerHour(1), nil, core.Policy{Match: core.Match{Routes: []string{"/elsewhere"}}})
	}, calls: times(2)},
	{name: "stacked", layers: func(t *testing.T) []layer {
		store := standingStore(t)
		return append(one(t, store, core.PerHour(3), nil, core.Policy{}),
			one(t, store, core.PerHour(2), keyfunc.Const("all"), core.Policy{Name: "inner"})...)
	}, calls: times(4)},
}

// downStoreT is a store whose backend is down, without a guard.
func downStoreT(t *testing.T) core.Store {
	s := &adaptertest.FlakyStore{Store: standingStore(t)}
	s.Down.Store(true)
	return s
}

// TestStreamsAndUnaryCallsAlike: the same calls, one server taking them as
// unary calls and another (with the same configuration, on a store of its
// own on a clock that stands still) as streams of one message, get the same
// answers: status and message, RetryInfo, QuotaFailure and ErrorInfo, every
// rate-limit field of the header and of the trailer, grpc-retry-pushback-ms,
// the Decision the handler saw and the handler's runs; under denials, a
// degraded store, a client gone, panicking key functions and callbacks,
// refunds, handlers that send their header and stacked interceptors. The waits sent include the time each
// decision took, so they may differ by that.
func TestStreamsAndUnaryCallsAlike(t *testing.T) {
	for _, tc := range symCases {
		t.Run(tc.name, func(t *testing.T) {
			unary, stream := symServer(t, tc, false), symServer(t, tc, true)
			for i, md := range tc.calls {
				ctx := metadata.AppendToOutgoingContext(t.Context(), md...)
				u := observe(t, unary.unary(t, ctx, methodUnary), unary)
				s := observe(t, stream.bidi(t, ctx, methodBidi), stream)
				require.InDelta(t, u.wait, s.wait, 100, "call %d: the waits differ by more than the decisions' time", i+1)
				u.wait, s.wait = 0, 0
				require.Equal(t, u, s, "call %d: a stream answered unlike a unary call", i+1)
			}
		})
	}
}

// symServer serves tc's interceptors, with the conformance suite's gone
// and report around them, for unary calls or for streams.
func symServer(t *testing.T, tc symCase, streams bool) *server {
	var opts []grpc.ServerOption
	if streams {
		chain := []grpc.StreamServerInterceptor{goneStream}
		for _, l := range tc.layers(t) {
			chain = append(chain, grpclimit.StreamServerInterceptor(l.lim, l.opts...))
		}
		opts = append(opts, grpc.ChainStreamInterceptor(append(chain, reportStream)...))
	} else {
		chain := []grpc.UnaryServerInterceptor{gone}
		for _, l := range tc.layers(t) {
			chain = append(chain, grpclimit.UnaryServerInterceptor(l.lim, l.opts...))
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(append(chain, report)...))
	}
	s := serve(t, bufconnTransport, opts)
	if tc.fail {
		fail := status.Error(codes.Internal, "handler failed")
		s.echo.fail.Store(&fail)
	}
	s.echo.sendHeader.Store(tc.sendHeader)
	return s
}

// seen is what a client saw of a call, in a form to compare: the wait it
// was told (the pushback, which RetryInfo, ErrorInfo's retry_after_ms and
// the message must repeat) apart.
type seen struct {
	Code             codes.Code
	Message          string
	RetryInfo        bool
	Violations       []string
	ErrorInfo        map[string]string
	Header, Trailer  map[string][]string
	Runs, Decisions  int64
	HandlerSaw, Resp string
	wait             float64 // milliseconds
}

func observe(t *testing.T, r result, s *server) seen {
	t.Helper()
	st := status.Convert(r.err)
	o := seen{Code: st.Code(), Message: st.Message(), Runs: s.echo.calls.Load(), Resp: r.resp.GetValue(),
		Header: rateLimitOf(r.header), Trailer: rateLimitOf(r.trailer)}
	if d, ok := s.echo.decisionSeen(); ok {
		o.HandlerSaw = adaptertest.Describe(&d, true)
	}
	s.echo.mu.Lock()
	o.Decisions = int64(len(s.echo.decisions))
	s.echo.mu.Unlock()
	pushback := r.trailer.Get(grpclimit.MetadataPushback)
	if st.Code() != codes.ResourceExhausted {
		require.Nil(t, pushback, "a pushback on %v", st)
		return o
	}
	det := denial(t, r.err)
	for _, v := range det.quota.GetViolations() {
		o.Violations = append(o.Violations, strings.Join([]string{v.GetSubject(), v.GetQuotaId(), strconv.FormatInt(v.GetQuotaValue(), 10), v.GetDescription()}, " | "))
	}
	o.ErrorInfo = det.info.GetMetadata()
	require.Len(t, pushback, 1)
	require.Equal(t, pushback[0], o.ErrorInfo["retry_after_ms"], "ErrorInfo's wait is the pushback")
	ms, err := strconv.ParseInt(pushback[0], 10, 64)
	require.NoError(t, err)
	if ms < 0 {
		require.Nil(t, det.retry, "no RetryInfo when no wait helps")
		return o
	}
	wait := time.Duration(ms) * time.Millisecond
	require.Equal(t, wait, det.retry.GetRetryDelay().AsDuration(), "RetryInfo is the pushback")
	require.Contains(t, o.Message, "retry in "+wait.String())
	o.RetryInfo, o.wait = true, float64(ms)
	o.Message = strings.Replace(o.Message, wait.String(), "WAIT", 1)
	o.ErrorInfo = with(o.ErrorInfo, "retry_after_ms", "WAIT")
	o.Trailer[grpclimit.MetadataPushback] = []string{"WAIT"}
	return o
}

// rateLimitOf is md's rate-limit fields and the Decision the handler
// reported.
func rateLimitOf(md metadata.MD) map[string][]string {
	out := map[string][]string{}
	for _, k := range append(rateLimitKeys, strings.ToLower(adaptertest.HeaderDecision), "x-app") {
		if v := md.Get(k); v != nil {
			out[k] = v
		}
	}
	return out
}

// with is a copy of m with k set to v.
func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for mk, mv := range m {
		if mk != k {
			out[mk] = mv
		}
	}
	return out
}

// A unary call and a stream under the same key and policy share its quota:
// taken in turns, each sees what the other left, and the first denied is
// denied alike.
func TestStreamsAndUnaryCallsShareAQuota(t *testing.T) {
	lim := newLimiter(t, standingStore(t), "shared", core.PerHour(4), keyfunc.Const("one"))
	s := serve(t, bufconnTransport, []grpc.ServerOption{
		grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, grpclimit.WithHeaders(deltaHeaders))),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim, grpclimit.WithHeaders(deltaHeaders))),
	})
	for i := range 6 {
		var r result
		if i%2 == 0 {
			r = s.unary(t, t.Context(), methodUnary)
		} else {
			r = s.bidi(t, t.Context(), methodBidi)
		}
		if i < 4 {
			require.NoError(t, r.err, "call %d", i+1)
			require.Equal(t, []string{strconv.Itoa(3 - i)}, r.header.Get(grpclimit.MetadataRemaining), "call %d", i+1)
			continue
		}
		denial(t, r.err)
		require.Equal(t, []string{"900"}, r.trailer.Get(grpclimit.MetadataRetryAfter), "call %d: a quarter hour to the next unit", i+1)
	}
}
