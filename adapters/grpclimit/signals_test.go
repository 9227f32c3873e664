package grpclimit_test

import (
	"context"
	"strconv"
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
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestNoRateLimitInRealTrailer: when a handler sent the
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

func (s *slowStore) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	if s.slow.Load() {
		time.Sleep(3 * time.Millisecond)
	}
	return s.Store.Take(ctx, ops, out)
}

// TestRetryAtThePushbackFromSend: a real grpc-go client
// that waits exactly grpc-retry-pushback-ms, counted from the moment it
// sent the denied call, is admitted, even when the denial's decision was
// slow (a store stall) and the retry's fast; so is one that waits the
// RetryInfo delay. Real Redis, real TCP.
//
// The wait is counted from the moment the server received the denied call
// (an interceptor ahead of the limiter stamps it): no server can see the
// client's send, and on a loaded machine the call's trip to the server can
// take longer than its retry's, which makes a client counting from its send
// early by the difference. On an idle loopback the two instants are within
// a fraction of a millisecond, and a pushback that left out the time the
// decision took (3ms here, against a millisecond of margin) still makes the
// retry early.
func TestRetryAtThePushbackFromSend(t *testing.T) {
	rs := redistest.StartServer(t)
	rstore, err := redisstore.New(rs.Client(t), redisstore.WithTimeout(10*time.Second)) // not about Redis's latency
	require.NoError(t, err)
	t.Cleanup(func() { _ = rstore.Close() })
	store := &slowStore{Store: rstore}
	lim := newLimiter(t, store, "tight", core.Per(1, 120*time.Millisecond), keyfunc.Const("one"))
	var received atomic.Int64 // when the server received the last call, in ns since the Unix epoch
	stamp := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		received.Store(time.Now().UnixNano())
		return handler(ctx, req)
	}
	s := serve(t, tcpTransport, []grpc.ServerOption{grpc.ChainUnaryInterceptor(stamp, grpclimit.UnaryServerInterceptor(lim))})
	const trials = 16
	retried := 0
	for trial := 0; retried < trials && trial < 4*trials; trial++ {
		store.slow.Store(true)
		r := s.unary(t, t.Context(), methodUnary)
		store.slow.Store(false)
		if r.err == nil {
			continue
		}
		sent := time.Unix(0, received.Load())
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

// TestQuotaSignalsDescribeTheAppliedLimit: under an
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

// TestPanickingCallbacksOnStreams: grpc-go does not recover handlers, so
// a panicking key function, skip or cost callback would take the server
// down; a stream that opens with one is undecided and goes to the error
// handler. (Unary calls: the conformance suite.)
func TestPanickingCallbacksOnStreams(t *testing.T) {
	for _, cb := range []adaptertest.Callback{adaptertest.KeyCallback, adaptertest.SkipCallback, adaptertest.CostCallback} {
		t.Run(string(cb), func(t *testing.T) {
			lim := newLimiter(t, newStore(t), "p", core.PerHour(10), nil)
			got := make(chan error, 16)
			opts := append(panicOption(cb), grpclimit.WithErrorHandler(func(_ context.Context, _ string, err error) (bool, error) {
				got <- err
				return grpclimit.FailClosed(nil, "", err)
			}))
			s := serve(t, bufconnTransport, []grpc.ServerOption{
				grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim, opts...)),
			})
			for range 3 {
				cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
				require.NoError(t, err)
				err = cs.RecvMsg(new(wrapperspb.StringValue))
				if cb == adaptertest.KeyCallback && len(got) == 0 {
					continue // the Limiter skipped the policy
				}
				require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
				require.ErrorContains(t, <-got, "panic")
			}
		})
	}
}

// TestNoRateLimitInRealStreamTrailer, for streams: a
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

// TestMissingIdentityDenied: a call without the
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
