package grpclimit_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
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
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestNoRateLimitInRealTrailer (issue 12 item 17c): when a handler sent the
// header and then failed, the status goes out in a real HTTP/2 trailer,
// where the draft forbids RateLimit and RateLimit-Policy; when it failed
// without sending the header, the response is Trailers-Only (one header
// block, still retryable) and carries them.
func TestNoRateLimitInRealTrailer(t *testing.T) {
	for _, tr := range transports {
		for _, sendHeader := range []bool{true, false} {
			t.Run(string(tr)+"/sendHeader="+strconv.FormatBool(sendHeader), func(t *testing.T) {
				lim := newLimiter(t, newStore(t), "per-ip", core.PerHour(10), nil)
				s := serve(t, tr, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))})
				s.echo.sendHeader.Store(sendHeader)
				fail := status.Error(codes.Internal, "handler failed")
				s.echo.fail.Store(&fail)
				r := s.unary(t, t.Context(), methodUnary)
				require.Equal(t, codes.Internal, status.Code(r.err))
				if sendHeader {
					require.Equal(t, []string{"1"}, r.header.Get("x-app"))
					require.Nil(t, r.trailer.Get(grpclimit.MetadataRateLimit), "RateLimit in a real trailer")
					require.Nil(t, r.trailer.Get(grpclimit.MetadataRateLimitPolicy), "RateLimit-Policy in a real trailer")
					require.Equal(t, []string{"9"}, r.trailer.Get(grpclimit.MetadataRemaining), "the X- fields may go in the trailer")
					return
				}
				require.Empty(t, r.header, "Trailers-Only")
				require.Len(t, r.trailer.Get(grpclimit.MetadataRateLimit), 1)
				require.Equal(t, []string{`"per-ip";q=10;w=3600`}, r.trailer.Get(grpclimit.MetadataRateLimitPolicy))
			})
		}
	}
}

// slowStore delays its decisions while slow is set, as a stalled or
// batched store call would.
type slowStore struct {
	core.Store
	slow atomic.Bool
}

func (s *slowStore) Take(ctx context.Context, key string, l core.Limit, cost int64) (core.Result, error) {
	if s.slow.Load() {
		time.Sleep(3 * time.Millisecond)
	}
	return s.Store.Take(ctx, key, l, cost)
}

// TestRetryAtThePushbackFromSend (issue 12 item 17e): a real grpc-go client
// that waits exactly grpc-retry-pushback-ms, counted from the moment it
// sent the denied call, is admitted, even when the denial's decision was
// slow (a store stall) and the retry's fast; so is one that waits the
// RetryInfo delay. Real Redis, real TCP.
func TestRetryAtThePushbackFromSend(t *testing.T) {
	rs := redistest.StartServer(t)
	rstore, err := redisstore.New(rs.Client(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rstore.Close() })
	store := &slowStore{Store: rstore}
	lim := newLimiter(t, store, "tight", core.Per(1, 120*time.Millisecond), keyfunc.Const("one"))
	s := serve(t, tcpTransport, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))})
	const trials = 16
	retried := 0
	for trial := 0; retried < trials && trial < 4*trials; trial++ {
		store.slow.Store(true)
		sent := time.Now()
		r := s.unary(t, t.Context(), methodUnary)
		store.slow.Store(false)
		if r.err == nil {
			continue
		}
		det := denial(t, r.err)
		var wait time.Duration
		if trial%2 == 0 {
			p := r.trailer.Get(grpclimit.MetadataPushback)
			require.Len(t, p, 1)
			ms, err := strconv.Atoi(p[0])
			require.NoError(t, err)
			wait = time.Duration(ms) * time.Millisecond
		} else {
			wait = det.retry.GetRetryDelay().AsDuration()
		}
		time.Sleep(time.Until(sent.Add(wait)))
		r = s.unary(t, t.Context(), methodUnary)
		require.NoError(t, r.err, "trial %d: retried %s after sending, as told", trial, wait)
		retried++
	}
	require.Equal(t, trials, retried)
}

// TestQuotaSignalsDescribeTheAppliedLimit (issue 12 item 15): under an
// override of 3/hour on a 10/min policy, the metadata, QuotaFailure and
// ErrorInfo all describe 3/hour.
func TestQuotaSignalsDescribeTheAppliedLimit(t *testing.T) {
	lim := newLimiter(t, newStore(t), "p", core.PerMinute(10), keyfunc.Const("tenant"))
	require.NoError(t, lim.SetOverride(t.Context(), "p", "tenant", core.PerHour(3), time.Now().Add(time.Hour)))
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))})
	for range 3 {
		r := s.unary(t, t.Context(), methodUnary)
		require.NoError(t, r.err)
		require.Equal(t, []string{"3"}, r.header.Get(grpclimit.MetadataLimit))
		require.Equal(t, []string{`"p";q=3;w=3600`}, r.header.Get(grpclimit.MetadataRateLimitPolicy))
	}
	r := s.unary(t, t.Context(), methodUnary)
	det := denial(t, r.err)
	require.Equal(t, []string{"3"}, r.trailer.Get(grpclimit.MetadataLimit))
	require.Equal(t, []string{`"p";q=3;w=3600`}, r.trailer.Get(grpclimit.MetadataRateLimitPolicy))
	v := det.quota.GetViolations()[0]
	require.EqualValues(t, 3, v.GetQuotaValue())
	require.Contains(t, v.GetDescription(), "3 per 1h0m0s")
	require.Equal(t, "3", det.info.GetMetadata()["limit"])
}

// TestPanickingCallbacks (issue 12 item 7): grpc-go does not recover
// handlers, so a panicking key function, skip or cost callback used to take
// the server down; now the call is undecided and goes to the error handler.
func TestPanickingCallbacks(t *testing.T) {
	boom := func(keyfunc.Request) (string, error) { panic("boom") }
	cases := map[string][]grpclimit.Option{
		"key":  {grpclimit.WithKey(boom)},
		"skip": {grpclimit.WithSkip(func(context.Context, string) bool { panic("boom") })},
		"cost": {grpclimit.WithCost(func(context.Context, string, any) int64 { panic("boom") })},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t, newStore(t), "p", core.PerHour(10), nil)
			got := make(chan error, 16)
			opts := append(opts, grpclimit.WithErrorHandler(func(_ context.Context, _ string, err error) (bool, error) {
				got <- err
				return grpclimit.FailClosed(nil, "", err)
			}))
			s := serve(t, bufconnTransport, []grpc.ServerOption{
				grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, opts...)),
				grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim, opts...)),
			})
			for range 3 {
				r := s.unary(t, t.Context(), methodUnary)
				if name == "key" && len(got) == 0 {
					require.NoError(t, r.err) // the Limiter skipped the policy
					continue
				}
				require.Equal(t, codes.Unavailable, status.Code(r.err))
				require.ErrorContains(t, <-got, "panic")
			}
			cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
			require.NoError(t, err)
			err = cs.RecvMsg(new(wrapperspb.StringValue))
			if name == "key" && len(got) == 0 {
				return
			}
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		})
	}
}

// TestUndecidedLogIsRateLimited (issue 12 item 3).
func TestUndecidedLogIsRateLimited(t *testing.T) {
	lim := newLimiter(t, &failingStore{}, "p", core.PerHour(10), nil)
	var logs syncBuffer
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim,
		grpclimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))})
	start := time.Now()
	for range 200 {
		require.NoError(t, s.unary(t, t.Context(), methodUnary).err)
	}
	lines := strings.Count(logs.String(), "request not rate limited")
	require.GreaterOrEqual(t, lines, 1)
	require.LessOrEqual(t, lines, int(time.Since(start)/time.Second)+1)
}

// TestDisconnectedClient (issue 12 item 2): a call whose context is
// cancelled before the decision is counted or refused, never run
// uncounted; real Redis, alone and behind a guard.
func TestDisconnectedClient(t *testing.T) {
	rs := redistest.StartServer(t)
	for _, behind := range []string{"redis", "guard"} {
		t.Run(behind, func(t *testing.T) {
			rstore, err := redisstore.New(rs.Client(t), redisstore.WithPrefix(behind+":"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = rstore.Close() })
			var store core.Store = rstore
			if behind == "guard" {
				g, err := guard.New(rstore, guard.WithFailOpen(), guard.WithLogger(slog.New(slog.DiscardHandler)))
				require.NoError(t, err)
				store = g
			}
			const capacity = 5
			lim := newLimiter(t, store, "p", core.PerHour(capacity), keyfunc.Const("one"))
			gone := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if len(metadata.ValueFromIncomingContext(ctx, "x-gone")) > 0 {
					c, cancel := context.WithCancel(ctx)
					cancel() // the client went away as the call arrived
					ctx = c
				}
				return h(ctx, req)
			}
			s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.ChainUnaryInterceptor(gone,
				grpclimit.UnaryServerInterceptor(lim, grpclimit.WithLogger(slog.New(slog.DiscardHandler))))})
			for range 40 {
				s.unary(t, metadata.AppendToOutgoingContext(t.Context(), "x-gone", "1"), methodUnary)
			}
			require.LessOrEqual(t, s.echo.calls.Load(), int64(capacity))
			for range capacity + 2 {
				r := s.unary(t, t.Context(), methodUnary)
				if r.err != nil {
					var st interface{ GRPCStatus() *status.Status }
					require.True(t, errors.As(r.err, &st))
				}
			}
			require.LessOrEqual(t, s.echo.calls.Load(), int64(capacity), "handler runs never exceed what was counted")
			require.Positive(t, s.echo.calls.Load())
		})
	}
}

// TestNoRateLimitInRealStreamTrailer (issue 12 item 17c), for streams: a
// stream handler that sent its header (through the stream or through
// grpc.SendHeader on its context) and then failed gets no RateLimit fields
// in its trailer; one that failed first is answered Trailers-Only, with them.
func TestNoRateLimitInRealStreamTrailer(t *testing.T) {
	for _, how := range []string{"stream", "context", "none"} {
		t.Run(how, func(t *testing.T) {
			lim := newLimiter(t, newStore(t), "per-ip", core.PerHour(10), nil)
			fail := func(_ any, ss grpc.ServerStream) error {
				switch how {
				case "stream":
					require.NoError(t, ss.SendHeader(metadata.Pairs("x-app", "1")))
				case "context":
					require.NoError(t, grpc.SendHeader(ss.Context(), metadata.Pairs("x-app", "1")))
				}
				return status.Error(codes.Internal, "handler failed")
			}
			s := serve(t, bufconnTransport, []grpc.ServerOption{
				grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim)),
				grpc.UnknownServiceHandler(fail),
			})
			cs, err := s.conn.NewStream(t.Context(), &bidiDesc, "/sluice.test.Other/Fail")
			require.NoError(t, err)
			require.NoError(t, cs.CloseSend())
			err = cs.RecvMsg(new(wrapperspb.StringValue))
			require.Equal(t, codes.Internal, status.Code(err), "%v", err)
			hdr, _ := cs.Header()
			tr := cs.Trailer()
			if how == "stream" {
				// The metadata rode on the header the handler sent.
				require.Len(t, hdr.Get(grpclimit.MetadataRateLimit), 1)
			} else {
				require.Equal(t, []string{"9"}, tr.Get(grpclimit.MetadataRemaining), "the X- fields may go in the trailer")
			}
			if how == "none" {
				require.Nil(t, hdr.Get("x-app"))
				require.Len(t, tr.Get(grpclimit.MetadataRateLimit), 1, "Trailers-Only carries them")
				return
			}
			require.Equal(t, []string{"1"}, hdr.Get("x-app"))
			require.Nil(t, tr.Get(grpclimit.MetadataRateLimit), "RateLimit in a real trailer")
			require.Nil(t, tr.Get(grpclimit.MetadataRateLimitPolicy), "RateLimit-Policy in a real trailer")
		})
	}
}

// TestMissingIdentityDenied (issue 12 items 3 and 17a): a call without the
// identity a DenyRequest policy requires is refused with pushback -1, no
// RetryInfo, and a message and violation that say why.
func TestMissingIdentityDenied(t *testing.T) {
	lim, err := core.NewLimiter(newStore(t), []core.Policy{
		{Name: "per-key", Key: keyfunc.Header("x-api-key"), Limit: core.PerMinute(10), MissingKey: core.DenyRequest},
	})
	require.NoError(t, err)
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim))})
	r := s.unary(t, t.Context(), methodUnary)
	det := denial(t, r.err)
	require.Nil(t, det.retry)
	require.Equal(t, []string{"-1"}, r.trailer.Get(grpclimit.MetadataPushback))
	require.Contains(t, det.st.Message(), "no identity")
	require.Contains(t, det.quota.GetViolations()[0].GetDescription(), "no identity")
	require.NoError(t, s.unary(t, metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "k"), methodUnary).err)
}
