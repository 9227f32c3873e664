package grpclimit_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/core"
)

// retryResourceExhausted is a client retry policy that retries
// RESOURCE_EXHAUSTED with a backoff far shorter than any pushback.
const retryResourceExhausted = `{"methodConfig":[{"name":[{"service":"sluice.test.Echo"}],
	"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.001s","backoffMultiplier":1,
	"retryableStatusCodes":["RESOURCE_EXHAUSTED"]}}]}`

// attemptRecorder is a server interceptor, installed before grpclimit, that
// counts attempts and records the grpc-retry-pushback-ms trailer each one
// was given, by wrapping the call's transport stream.
type attemptRecorder struct {
	mu        sync.Mutex
	pushbacks []string // one per attempt, "" when none
	at        []time.Time
}

type recordingStream struct {
	grpc.ServerTransportStream
	trailer metadata.MD
}

func (s *recordingStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return s.ServerTransportStream.SetTrailer(md)
}

func (a *attemptRecorder) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	rs := &recordingStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	resp, err := h(grpc.NewContextWithServerTransportStream(ctx, rs), req)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at = append(a.at, time.Now())
	p := rs.trailer.Get(grpclimit.MetadataPushback)
	if len(p) == 1 {
		a.pushbacks = append(a.pushbacks, p[0])
	} else {
		a.pushbacks = append(a.pushbacks, "")
	}
	return resp, err
}

func (a *attemptRecorder) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pushbacks)
}

// TestRetryHonoursPushback: a grpc-go client whose retry policy retries
// RESOURCE_EXHAUSTED waits for the server's pushback (not its own 1ms
// backoff) and then succeeds.
func TestRetryHonoursPushback(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			attempts := &attemptRecorder{}
			// One call per 500ms: the second call right after the first waits
			// about 500ms.
			l := core.Limit{Algorithm: core.TokenBucket, Rate: 1, Period: 500 * time.Millisecond}
			lim := newLimiter(t, newStore(t), "slow", l, nil)
			s := serve(t, tr, []grpc.ServerOption{grpc.ChainUnaryInterceptor(attempts.unary, grpclimit.UnaryServerInterceptor(lim))},
				grpc.WithDefaultServiceConfig(retryResourceExhausted))

			require.NoError(t, s.unary(t, t.Context(), methodUnary).err)
			require.Equal(t, 1, attempts.count())

			start := time.Now()
			r := s.unary(t, t.Context(), methodUnary)
			elapsed := time.Since(start)
			require.NoError(t, r.err, "the retry after the pushback succeeds")
			require.Equal(t, "echo:hi", r.resp.GetValue())

			attempts.mu.Lock()
			defer attempts.mu.Unlock()
			require.Len(t, attempts.pushbacks, 3, "the second call took two attempts")
			require.Equal(t, "", attempts.pushbacks[2], "the retry was admitted")
			pushback, err := strconv.Atoi(attempts.pushbacks[1])
			require.NoError(t, err)
			require.GreaterOrEqual(t, pushback, 300)
			require.LessOrEqual(t, pushback, 501+100) // the wait, a 1 ms margin, the decision's time
			wait := time.Duration(pushback) * time.Millisecond
			require.GreaterOrEqual(t, elapsed, wait, "the client waited for the pushback")
			gap := attempts.at[2].Sub(attempts.at[1])
			require.GreaterOrEqual(t, gap, wait-5*time.Millisecond, "the server saw the retry after the pushback")
			t.Logf("%s: pushback %dms, second call took %s (attempt gap %s)", tr, pushback, elapsed.Round(time.Millisecond), gap.Round(time.Millisecond))
		})
	}
}
