package grpclimit_test

import (
	"context"
	"io"
	"strconv"
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
)

// byUser keys a login call by the user name its request message carries
// (here the value of a StringValue): one line with grpclimit.Message.
func byUser(r keyfunc.Request) (string, error) {
	m, _ := grpclimit.Message(r)
	return m.(*wrapperspb.StringValue).GetValue(), nil
}

// login calls methodUnary as user and returns what the client saw.
func (s *server) login(t *testing.T, user string) result {
	t.Helper()
	var r result
	r.resp = new(wrapperspb.StringValue)
	r.err = s.conn.Invoke(t.Context(), methodUnary, wrapperspb.String(user), r.resp, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

// A key function reaches the request message (Message) and the full method
// (Route), and KeyFunc builds a key from both: a login limit keyed by user
// name counts each user apart, on the server and on the client.
func TestMessageKeysALoginByUser(t *testing.T) {
	logins := newLimiter(t, newStore(t), "login", core.PerHour(2), byUser)
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(nil,
		grpclimit.WithMethodLimiter(methodUnary, logins)))})
	for i := range 2 {
		require.NoError(t, s.login(t, "alice").err, "alice, call %d", i+1)
	}
	require.Equal(t, codes.ResourceExhausted, status.Code(s.login(t, "alice").err))
	r := s.login(t, "bob")
	require.NoError(t, r.err, "another user has a quota of his own")
	require.Equal(t, []string{"1"}, r.header.Get("x-ratelimit-remaining"))

	// The client interceptor sees the message too, and the full method.
	var seen []string
	routed := func(r keyfunc.Request) (string, error) {
		user, err := byUser(r)
		seen = append(seen, r.Route()+" "+user)
		return user, err
	}
	client := newLimiter(t, newStore(t), "login", core.PerHour(1), routed)
	icpt := grpclimit.UnaryClientInterceptor(client)
	invoke := func(user string) error {
		return icpt(t.Context(), methodUnary, wrapperspb.String(user), new(wrapperspb.StringValue), nil,
			func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil })
	}
	require.NoError(t, invoke("carol"))
	require.Equal(t, codes.ResourceExhausted, status.Code(invoke("carol")))
	require.NoError(t, invoke("dave"))
	require.Equal(t, []string{methodUnary + " carol", methodUnary + " carol", methodUnary + " dave"}, seen)

	// KeyFunc is the same key from the interceptor's own arguments.
	byUserToo := grpclimit.KeyFunc(func(_ context.Context, method string, req any) (string, error) {
		return method + " " + req.(*wrapperspb.StringValue).GetValue(), nil
	})
	keyed := newLimiter(t, newStore(t), "login", core.PerHour(1), byUserToo)
	s3 := serve(t, bufconnTransport, []grpc.ServerOption{grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(keyed))})
	require.NoError(t, s3.login(t, "erin").err)
	require.Equal(t, codes.ResourceExhausted, status.Code(s3.login(t, "erin").err))
	require.NoError(t, s3.login(t, "frank").err)
	_, notACall := byUserToo(&keyfunc.Static{})
	require.ErrorContains(t, notACall, "grpclimit: KeyFunc: not a request of the grpclimit")

	// No message: a stream as it opens, or a view built by Request.
	_, ok := grpclimit.Message(grpclimit.Request(t.Context(), methodUnary))
	require.False(t, ok)
	_, ok = grpclimit.Message(&keyfunc.Static{})
	require.False(t, ok)
	var atOpen []bool
	opened := newLimiter(t, newStore(t), "streams", core.PerHour(10), func(r keyfunc.Request) (string, error) {
		_, ok := grpclimit.Message(r)
		atOpen = append(atOpen, ok)
		return "k", nil
	})
	s2 := serve(t, bufconnTransport, []grpc.ServerOption{grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(opened))})
	cs, err := s2.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
	require.NoError(t, err)
	require.NoError(t, cs.CloseSend())
	require.ErrorIs(t, cs.RecvMsg(new(wrapperspb.StringValue)), io.EOF)
	require.Equal(t, []bool{false}, atOpen)
}

// requireOneValueEach requires every rate-limit key of md to have at most
// one value: stacked interceptors send the merge's metadata once.
func requireOneValueEach(t *testing.T, md metadata.MD) {
	t.Helper()
	for _, k := range rateLimitKeys {
		require.LessOrEqual(t, len(md.Get(k)), 1, "metadata %s: %q", k, md.Get(k))
	}
}

// A global interceptor and a per-method one stacked in the chain: the
// handler sees the merge of both Decisions (middleware.Merge), the metadata name
// every policy and the most constraining one, once; a denial by either is
// Trailers-Only with the merge's metadata, and the global one still counts
// what the per-method one denied.
func TestStackedUnaryInterceptorsMerge(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			store := newStore(t)
			global := newLimiter(t, store, "global", core.PerHour(5), nil)
			logins := newLimiter(t, store, "login", core.PerHour(2), byUser)
			rec := &deniedRecorder{}
			s := serve(t, tr, []grpc.ServerOption{grpc.ChainUnaryInterceptor(
				grpclimit.UnaryServerInterceptor(global, grpclimit.WithHeaders(deltaHeaders), grpclimit.WithDeniedHandler(rec.handler)),
				grpclimit.UnaryServerInterceptor(nil, grpclimit.WithMethodLimiter(methodUnary, logins),
					grpclimit.WithHeaders(deltaHeaders), grpclimit.WithDeniedHandler(rec.handler)),
			)})

			for i := 1; i <= 2; i++ {
				r := s.login(t, "alice")
				require.NoError(t, r.err)
				d := s.echo.last(t)
				require.True(t, d.Allowed)
				require.Len(t, d.Results, 2, "the handler sees both limiters' policies")
				require.Equal(t, "global", d.Results[0].Policy)
				require.Equal(t, "login", d.Bound().Policy, "fewer remaining: login binds")
				requireOneValueEach(t, r.header)
				requireFields(t, r.header, deltaHeaders.Format(&d, time.Time{}))
				require.Equal(t, []string{`"global";q=5;w=3600, "login";q=2;w=3600`}, r.header.Get("ratelimit-policy"))
				require.Equal(t, []string{strconv.Itoa(2 - i)}, r.header.Get("x-ratelimit-remaining"))
				requireNoRateLimitMetadata(t, r.trailer)
			}

			// The per-method limiter denies; the global one had counted it.
			r := s.login(t, "alice")
			det := denial(t, r.err)
			d := rec.last(t)
			require.False(t, d.Allowed)
			require.Len(t, d.Results, 2)
			require.Equal(t, "login", d.Bound().Policy)
			requireWait(t, det.retry.GetRetryDelay().AsDuration(), d.Bound().RetryAfter)
			require.Len(t, det.quota.GetViolations(), 1)
			require.Equal(t, "login", det.quota.GetViolations()[0].GetQuotaId())
			requireNoRateLimitMetadata(t, r.header)
			requireOneValueEach(t, r.trailer)
			requireFields(t, r.trailer, deltaHeaders.Format(&d, time.Time{}), grpclimit.MetadataPushback, pushbackIn(t, r.trailer, d.Bound().RetryAfter))
			require.EqualValues(t, 2, s.echo.calls.Load())

			// A method only the global limiter limits: its metadata alone.
			r = s.unary(t, t.Context(), methodOther)
			require.NoError(t, r.err)
			require.Equal(t, []string{`"global";q=5;w=3600`}, r.header.Get("ratelimit-policy"))
			require.Len(t, s.echo.last(t).Results, 1)
			requireOneValueEach(t, r.header)

			// bob takes the global limit's last unit: now global binds.
			r = s.login(t, "bob")
			require.NoError(t, r.err)
			d = s.echo.last(t)
			require.Equal(t, "global", d.Bound().Policy)
			require.Len(t, r.header.Get("ratelimit"), 1)
			require.Regexp(t, `^"global";r=0;t=\d+$`, r.header.Get("ratelimit")[0])
			requireOneValueEach(t, r.header)

			// The global limiter denies: the per-method one never runs.
			r = s.login(t, "carol")
			det = denial(t, r.err)
			d = rec.last(t)
			require.Len(t, d.Results, 1)
			require.Equal(t, "global", d.Bound().Policy)
			requireFields(t, r.trailer, deltaHeaders.Format(&d, time.Time{}), grpclimit.MetadataPushback, pushbackIn(t, r.trailer, d.Bound().RetryAfter))

		})
	}
}

// Stacked stream interceptors merge as unary ones do: the stream's header
// carries the merge's metadata once, and a denial at open by the inner one
// is Trailers-Only with the merge's.
func TestStackedStreamInterceptorsMerge(t *testing.T) {
	store := newStore(t)
	global := newLimiter(t, store, "global", core.PerHour(10), nil)
	streams := newLimiter(t, store, "streams", core.PerHour(2), keyfunc.Const("all"))
	rec := &deniedRecorder{}
	s := serve(t, bufconnTransport, []grpc.ServerOption{grpc.ChainStreamInterceptor(
		grpclimit.StreamServerInterceptor(global, grpclimit.WithHeaders(deltaHeaders)),
		grpclimit.StreamServerInterceptor(nil, grpclimit.WithMethodLimiter(methodBidi, streams),
			grpclimit.WithHeaders(deltaHeaders), grpclimit.WithDeniedHandler(rec.handler)),
	)})
	for i := 1; i <= 2; i++ {
		cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
		require.NoError(t, err)
		require.NoError(t, cs.SendMsg(wrapperspb.String("m")))
		require.NoError(t, cs.RecvMsg(new(wrapperspb.StringValue)))
		h, err := cs.Header()
		require.NoError(t, err)
		d := s.echo.last(t)
		require.Len(t, d.Results, 2)
		require.Equal(t, "streams", d.Bound().Policy)
		requireOneValueEach(t, h)
		requireFields(t, h, deltaHeaders.Format(&d, time.Time{}))
		require.Equal(t, []string{`"global";q=10;w=3600, "streams";q=2;w=3600`}, h.Get("ratelimit-policy"))
		require.NoError(t, cs.CloseSend())
		require.ErrorIs(t, cs.RecvMsg(new(wrapperspb.StringValue)), io.EOF)
		requireNoRateLimitMetadata(t, cs.Trailer())
	}
	cs, err := s.conn.NewStream(t.Context(), &bidiDesc, methodBidi)
	require.NoError(t, err)
	det := denial(t, cs.RecvMsg(new(wrapperspb.StringValue)))
	d := rec.last(t)
	require.Len(t, d.Results, 2)
	require.Equal(t, "streams", d.Bound().Policy)
	requireWait(t, det.retry.GetRetryDelay().AsDuration(), d.Bound().RetryAfter)
	h, _ := cs.Header()
	requireNoRateLimitMetadata(t, h)
	requireOneValueEach(t, cs.Trailer())
	requireFields(t, cs.Trailer(), deltaHeaders.Format(&d, time.Time{}), grpclimit.MetadataPushback, pushbackIn(t, cs.Trailer(), d.Bound().RetryAfter))
	require.EqualValues(t, 2, s.echo.calls.Load())
}
