package grpclimit_test

import (
	"context"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

func ceilMS(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

func TestUnaryAllowedAndDenied(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			rec := &deniedRecorder{}
			lim := newLimiter(t, newStore(t), "per-ip", core.PerHour(3), nil)
			s := serve(t, tr, []grpc.ServerOption{grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim,
				grpclimit.WithHeaders(deltaHeaders), grpclimit.WithDeniedHandler(rec.handler)))})

			for i := 1; i <= 3; i++ {
				r := s.unary(t, t.Context(), methodUnary)
				require.NoError(t, r.err)
				require.Equal(t, "echo:hi", r.resp.GetValue())
				d := s.echo.last(t)
				require.True(t, d.Allowed)
				require.EqualValues(t, 3-i, d.Bound().Remaining)
				// The header metadata are the HTTP headers of the Decision.
				requireFields(t, r.header, deltaHeaders.Format(&d, time.Time{}))
				require.Equal(t, []string{strconv.Itoa(3 - i)}, r.header.Get("x-ratelimit-remaining"))
				requireNoRateLimitMetadata(t, r.trailer)
			}

			r := s.unary(t, t.Context(), methodUnary)
			require.EqualValues(t, 3, s.echo.calls.Load(), "the handler of a denied call ran")
			d := rec.last(t)
			require.False(t, d.Allowed)
			b := d.Bound()
			require.Positive(t, b.RetryAfter)

			det := denial(t, r.err)
			require.NotNil(t, det.retry)
			requireWait(t, det.retry.GetRetryDelay().AsDuration(), b.RetryAfter)
			require.Len(t, det.quota.GetViolations(), 1)
			v := det.quota.GetViolations()[0]
			require.Equal(t, "policy:per-ip", v.GetSubject())
			require.Equal(t, "per-ip", v.GetQuotaId())
			require.EqualValues(t, 3, v.GetQuotaValue())
			require.Contains(t, v.GetDescription(), "3 per 1h0m0s")
			require.Equal(t, grpclimit.ErrorReason, det.info.GetReason())
			require.Equal(t, grpclimit.ErrorDomain, det.info.GetDomain())
			require.Equal(t, map[string]string{
				"policy": "per-ip", "limit": "3", "remaining": "0", "state": "throttled",
				"retry_after_ms": waitMS(t, det.info.GetMetadata()["retry_after_ms"], b.RetryAfter), "reset_after_ms": ceilMS(b.ResetAfter),
			}, det.info.GetMetadata())
			require.Contains(t, det.st.Message(), "rate limit exceeded")

			// Trailers-Only: every value in the trailer, none in the header.
			requireNoRateLimitMetadata(t, r.header)
			f := deltaHeaders.Format(&d, time.Time{})
			require.Equal(t, 7, f.N, "a denial formats Retry-After too")
			requireFields(t, r.trailer, f, grpclimit.MetadataPushback, pushbackIn(t, r.trailer, b.RetryAfter))
			pushbackIn(t, r.trailer, b.RetryAfter)
		})
	}
}

// TestWarningState: with a limit of 10, calls 1-8 are normal, 9 and 10 warn
// (usage above 80%), 11 is throttled; OnWarning fires once, at call 9.
func TestWarningState(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			var mu sync.Mutex
			var warnings []int64
			lim := newLimiter(t, newStore(t), "api", core.PerHour(10), nil,
				core.OnWarning(func(_ context.Context, _ keyfunc.Request, p core.PolicyResult) {
					mu.Lock()
					warnings = append(warnings, p.Remaining)
					mu.Unlock()
				}))
			s := serve(t, tr, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))})
			for i := 1; i <= 11; i++ {
				r := s.unary(t, t.Context(), methodUnary)
				want, md := "normal", r.header
				switch {
				case i == 11:
					want, md = "throttled", r.trailer
					require.Equal(t, codes.ResourceExhausted, status.Code(r.err))
				case i >= 9:
					want = "warning"
				}
				if i <= 10 {
					require.NoError(t, r.err, "call %d", i)
					requireNoRateLimitMetadata(t, r.trailer)
				}
				require.Equal(t, []string{want}, md.Get("x-ratelimit-state"), "call %d", i)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []int64{1}, warnings, "OnWarning once, at call 9 (1 remaining)")
		})
	}
}

// TestResetEpoch: by default x-ratelimit-reset is the Unix time at which the
// key is fresh again, as in HTTP.
func TestResetEpoch(t *testing.T) {
	lim := newLimiter(t, newStore(t), "api", core.PerMinute(6), nil)
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))})
	before := time.Now()
	r := s.unary(t, t.Context(), methodUnary)
	after := time.Now()
	require.NoError(t, r.err)
	d := s.echo.last(t)
	reset, err := strconv.ParseInt(r.header.Get("x-ratelimit-reset")[0], 10, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, reset, before.Add(d.Bound().ResetAfter).Unix())
	require.LessOrEqual(t, reset, after.Add(d.Bound().ResetAfter).Unix()+1)
	requireFields(t, r.header, ratelimitfields.Config{}.Format(&d, time.Unix(reset, 0).Add(-d.Bound().ResetAfter)))
}

// TestHandlerError: an admitted call whose handler fails keeps its metadata
// in the trailer, so the response stays Trailers-Only and a retry policy
// still retries it.
func TestHandlerError(t *testing.T) {
	lim := newLimiter(t, newStore(t), "api", core.PerHour(100), nil)
	const retryUnavailable = `{"methodConfig":[{"name":[{"service":"sluice.test.Echo"}],
		"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.01s","backoffMultiplier":1,
		"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	s := serve(t, bufconnTransport,
		[]grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, grpclimit.WithHeaders(deltaHeaders)))},
		grpc.WithDefaultServiceConfig(retryUnavailable))
	failure := status.Error(codes.Unavailable, "backend down")
	s.echo.fail.Store(&failure)

	r := s.unary(t, t.Context(), methodUnary)
	require.Equal(t, codes.Unavailable, status.Code(r.err))
	require.EqualValues(t, 3, s.echo.calls.Load(), "the application's error was retried")
	d := s.echo.last(t)
	require.EqualValues(t, 97, d.Bound().Remaining)
	requireNoRateLimitMetadata(t, r.header)
	requireFields(t, r.trailer, deltaHeaders.Format(&d, time.Time{}))
}

// TestHandlerSentHeader: when the handler sent the header itself, the
// metadata go to the trailer, without the fields the draft forbids there.
func TestHandlerSentHeader(t *testing.T) {
	lim := newLimiter(t, newStore(t), "api", core.PerHour(100), nil)
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, grpclimit.WithHeaders(deltaHeaders)))})
	s.echo.sendHeader.Store(true)
	r := s.unary(t, t.Context(), methodUnary)
	require.NoError(t, r.err)
	require.Equal(t, []string{"1"}, r.header.Get("x-app"))
	requireNoRateLimitMetadata(t, r.header)
	d := s.echo.last(t)
	requireFields(t, r.trailer, ratelimitfields.Config{Reset: ratelimitfields.ResetDelta, Omit: ratelimitfields.Draft}.Format(&d, time.Time{}))
}

func TestNeverAdmitted(t *testing.T) {
	attempts := &attemptRecorder{}
	lim := newLimiter(t, newStore(t), "small", core.PerHour(2), nil)
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.ChainUnaryInterceptor(attempts.unary,
		grpclimit.UnaryServerInterceptor(lim, grpclimit.WithCost(func(context.Context, string, any) int64 { return 3 })))},
		grpc.WithDefaultServiceConfig(retryResourceExhausted))
	r := s.unary(t, t.Context(), methodUnary)
	det := denial(t, r.err)
	require.Nil(t, det.retry, "no RetryInfo for a call that can never pass")
	require.Equal(t, "-1", det.info.GetMetadata()["retry_after_ms"])
	require.Contains(t, det.quota.GetViolations()[0].GetDescription(), "can never be admitted")
	require.Equal(t, []string{"-1"}, r.trailer.Get(grpclimit.MetadataPushback))
	require.Nil(t, r.trailer.Get(grpclimit.MetadataRetryAfter))
	require.Equal(t, []string{"throttled"}, r.trailer.Get("x-ratelimit-state"))
	require.Equal(t, 1, attempts.count(), "pushback -1 stops the client's retries")
}

// TestStreamOpen: streams are checked when they open; the decision rides on
// the stream's header, a denial is Trailers-Only.
func TestStreamOpen(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			rec := &deniedRecorder{}
			lim := newLimiter(t, newStore(t), "streams", core.PerHour(2), nil)
			s := serve(t, tr, []grpc.ServerOption{grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim,
				grpclimit.WithHeaders(deltaHeaders), grpclimit.WithDeniedHandler(rec.handler)))})
			for i := 1; i <= 2; i++ {
				cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
				require.NoError(t, err)
				require.NoError(t, cs.SendMsg(wrapperspb.String("m")))
				out := new(wrapperspb.StringValue)
				require.NoError(t, cs.RecvMsg(out))
				require.Equal(t, "echo:m", out.GetValue())
				h, err := cs.Header()
				require.NoError(t, err)
				d := s.echo.last(t)
				require.True(t, d.Allowed)
				requireFields(t, h, deltaHeaders.Format(&d, time.Time{}))
				require.NoError(t, cs.CloseSend())
				require.ErrorIs(t, cs.RecvMsg(out), io.EOF)
				requireNoRateLimitMetadata(t, cs.Trailer())
			}
			cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
			require.NoError(t, err)
			err = cs.RecvMsg(new(wrapperspb.StringValue))
			det := denial(t, err)
			d := rec.last(t)
			requireWait(t, det.retry.GetRetryDelay().AsDuration(), d.Bound().RetryAfter)
			h, _ := cs.Header()
			requireNoRateLimitMetadata(t, h)
			requireFields(t, cs.Trailer(), deltaHeaders.Format(&d, time.Time{}), grpclimit.MetadataPushback, pushbackIn(t, cs.Trailer(), d.Bound().RetryAfter))
			require.EqualValues(t, 2, s.echo.calls.Load())
		})
	}
}

// TestStreamMessages: WithMessageLimit checks every message received; the
// last message decision is in the trailer, without RateLimit and
// RateLimit-Policy.
func TestStreamMessages(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			rec := &deniedRecorder{}
			store := newStore(t)
			open := newLimiter(t, store, "streams", core.PerHour(5), nil)
			msgs := newLimiter(t, store, "messages", core.PerHour(3), nil)
			s := serve(t, tr, []grpc.ServerOption{grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(open,
				grpclimit.WithMessageLimit(msgs), grpclimit.WithHeaders(deltaHeaders), grpclimit.WithDeniedHandler(rec.handler)))})

			cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
			require.NoError(t, err)
			for i := 1; i <= 3; i++ {
				require.NoError(t, cs.SendMsg(wrapperspb.String(strconv.Itoa(i))))
				out := new(wrapperspb.StringValue)
				require.NoError(t, cs.RecvMsg(out))
				require.Equal(t, "echo:"+strconv.Itoa(i), out.GetValue())
			}
			h, err := cs.Header()
			require.NoError(t, err)
			openD := s.echo.last(t)
			requireFields(t, h, deltaHeaders.Format(&openD, time.Time{}))
			require.Equal(t, []string{`"streams";r=4;t=720`}, h.Get("ratelimit"))

			require.NoError(t, cs.SendMsg(wrapperspb.String("4")))
			err = cs.RecvMsg(new(wrapperspb.StringValue))
			det := denial(t, err)
			d := rec.last(t)
			require.Equal(t, "messages", d.Bound().Policy)
			requireWait(t, det.retry.GetRetryDelay().AsDuration(), d.Bound().RetryAfter)
			trl := cs.Trailer()
			requireFields(t, trl, ratelimitfields.Config{Reset: ratelimitfields.ResetDelta, Omit: ratelimitfields.Draft}.Format(&d, time.Time{}),
				grpclimit.MetadataPushback, pushbackIn(t, trl, d.Bound().RetryAfter))
			require.Equal(t, []string{"0"}, trl.Get("x-ratelimit-remaining"))
			require.Equal(t, []string{"throttled"}, trl.Get("x-ratelimit-state"))
		})
	}
}

// TestStreamMessagesOnly: a nil default limiter with WithMessageLimit limits
// messages only; a stream that ends normally carries the last message
// decision in its trailer.
func TestStreamMessagesOnly(t *testing.T) {
	msgs := newLimiter(t, newStore(t), "messages", core.PerHour(10), nil)
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(nil,
		grpclimit.WithMessageLimit(msgs)))})
	cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, cs.SendMsg(wrapperspb.String("x")))
		require.NoError(t, cs.RecvMsg(new(wrapperspb.StringValue)))
	}
	require.NoError(t, cs.CloseSend())
	require.ErrorIs(t, cs.RecvMsg(new(wrapperspb.StringValue)), io.EOF)
	h, err := cs.Header()
	require.NoError(t, err)
	requireNoRateLimitMetadata(t, h)
	tr := cs.Trailer()
	require.Equal(t, []string{"8"}, tr.Get("x-ratelimit-remaining"))
	require.Equal(t, []string{"normal"}, tr.Get("x-ratelimit-state"))
	require.Nil(t, tr.Get("ratelimit"))
	require.Nil(t, tr.Get(grpclimit.MetadataPushback))
	_, ok := s.echo.decisionSeen()
	require.False(t, ok, "no open decision when only messages are limited")
}

func TestPerMethodLimits(t *testing.T) {
	store := newStore(t)
	def := newLimiter(t, store, "default", core.PerHour(2), nil)
	strict := newLimiter(t, store, "strict", core.PerHour(1), nil)
	opts := []grpclimit.Option{
		grpclimit.WithMethodLimiter(methodUnary, strict),
		grpclimit.WithSkipMethods("/grpc.health.v1.Health/"),
	}
	s := serve(t, bufconnTransport, []grpc.ServerOption{
		grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(def, opts...)),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(def, opts...)),
	})
	for range 20 {
		r := s.health(t, t.Context())
		require.NoError(t, r.err)
		requireNoRateLimitMetadata(t, r.header)
	}
	r := s.unary(t, t.Context(), methodUnary)
	require.NoError(t, r.err)
	require.Equal(t, []string{`"strict";q=1;w=3600`}, r.header.Get("ratelimit-policy"))
	r = s.unary(t, t.Context(), methodUnary)
	require.Equal(t, "strict", denial(t, r.err).info.GetMetadata()["policy"])
	for i := 1; i <= 3; i++ {
		r = s.unary(t, t.Context(), methodOther)
		require.Equal(t, []string{`"default";q=2;w=3600`}, append(r.header.Get("ratelimit-policy"), r.trailer.Get("ratelimit-policy")...))
		if i <= 2 {
			require.NoError(t, r.err)
		} else {
			require.Equal(t, codes.ResourceExhausted, status.Code(r.err))
		}
	}
	// The default limiter covers streams too, and it is spent.
	cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
	require.NoError(t, err)
	require.Equal(t, codes.ResourceExhausted, status.Code(cs.RecvMsg(new(wrapperspb.StringValue))))
}

func TestServiceLimitAndSkip(t *testing.T) {
	store := newStore(t)
	svc := newLimiter(t, store, "service", core.PerHour(1), nil)
	other := newLimiter(t, store, "other", core.PerHour(2), nil)
	icpt := grpclimit.UnaryServerInterceptor(nil,
		grpclimit.WithMethodLimiter("/sluice.test.Echo/", svc),
		grpclimit.WithMethodLimiter(methodOther, other), // exact wins over service
		grpclimit.WithSkip(func(ctx context.Context, _ string) bool {
			return len(metadata.ValueFromIncomingContext(ctx, "x-internal")) > 0
		}))
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.UnaryInterceptor(icpt)})
	require.NoError(t, s.unary(t, t.Context(), methodUnary).err)
	require.Equal(t, codes.ResourceExhausted, status.Code(s.unary(t, t.Context(), methodUnary).err))
	internal := metadata.AppendToOutgoingContext(t.Context(), "x-internal", "1")
	r := s.unary(t, internal, methodUnary)
	require.NoError(t, r.err, "WithSkip exempts the call")
	requireNoRateLimitMetadata(t, r.header)
	for range 2 {
		require.NoError(t, s.unary(t, t.Context(), methodOther).err)
	}
	require.Equal(t, codes.ResourceExhausted, status.Code(s.unary(t, t.Context(), methodOther).err))
	r = s.health(t, t.Context())
	require.NoError(t, r.err, "no default limiter: other services pass")
	requireNoRateLimitMetadata(t, r.header)
}

func TestConfigPanics(t *testing.T) {
	lim := newLimiter(t, newStore(t), "x", core.PerHour(1), nil)
	for _, m := range []string{"", "/", "//", "Svc/Method", "/Svc", "/Svc//", "/a/b/c", "//Method"} {
		require.Panics(t, func() { grpclimit.UnaryServerInterceptor(lim, grpclimit.WithMethodLimiter(m, lim)) }, "%q", m)
		require.Panics(t, func() { grpclimit.UnaryServerInterceptor(lim, grpclimit.WithSkipMethods(m)) }, "%q", m)
	}
	for _, m := range []string{"/Svc/", "/pkg.Svc/Method", "/grpc.health.v1.Health/Check"} {
		require.NotPanics(t, func() { grpclimit.StreamServerInterceptor(lim, grpclimit.WithMethodLimiter(m, lim)) }, "%q", m)
	}
	require.PanicsWithValue(t, "grpclimit.UnaryClientInterceptor: nil limiter and no WithMethodLimiter or WithMessageLimit: nothing to limit",
		func() { grpclimit.UnaryClientInterceptor(nil, grpclimit.WithSkipMethods("/a/")) })
	require.NotPanics(t, func() { grpclimit.StreamClientInterceptor(nil, grpclimit.WithMessageLimit(lim), nil) })
}

// TestConcurrent: N concurrent calls against a limit of 25 admit exactly 25.
func TestConcurrent(t *testing.T) {
	lim := newLimiter(t, newStore(t), "api", core.PerHour(25), nil)
	s := serve(t, tcpTransport, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codesSeen := map[codes.Code]int{}
	for range 60 {
		wg.Go(func() {
			err := s.conn.Invoke(t.Context(), methodUnary, wrapperspb.String("x"), new(wrapperspb.StringValue))
			mu.Lock()
			codesSeen[status.Code(err)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, map[codes.Code]int{codes.OK: 25, codes.ResourceExhausted: 35}, codesSeen)
}

// waitMS checks that v, the milliseconds sent for a wait of retry, is the
// wait plus the 1 ms margin rounded up, plus at most the time a decision
// takes (generously, 100 ms), and returns it.
func waitMS(t *testing.T, v string, retry time.Duration) string {
	t.Helper()
	ms, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err, v)
	lo := int64((retry + 2*time.Millisecond - 1) / time.Millisecond)
	require.GreaterOrEqual(t, ms, lo, "the wait %s, rounded up after a 1 ms margin", retry)
	require.LessOrEqual(t, ms, lo+100)
	return v
}

// pushbackIn checks the grpc-retry-pushback-ms of md against retry and
// returns it.
func pushbackIn(t *testing.T, md metadata.MD, retry time.Duration) string {
	t.Helper()
	v := md.Get(grpclimit.MetadataPushback)
	require.Len(t, v, 1)
	return waitMS(t, v[0], retry)
}

// requireWait checks a RetryInfo delay against the wait retry.
func requireWait(t *testing.T, got, retry time.Duration) {
	t.Helper()
	require.Zero(t, got%time.Millisecond, "whole milliseconds")
	waitMS(t, strconv.FormatInt(int64(got/time.Millisecond), 10), retry)
}
