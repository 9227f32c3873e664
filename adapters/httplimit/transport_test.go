package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// closeTracker is a request body that records whether it was closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

// The Transport spaces outbound calls to the limit (10/s, burst 1) on
// loopback: the server sees them at least 100ms apart, none is refused, and
// a call whose slot is beyond its deadline is never sent.
func TestTransportWaitsForTheLimit(t *testing.T) {
	var (
		mu      sync.Mutex
		arrived []time.Time
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
	}))
	defer srv.Close()
	s, err := memorystore.New()
	require.NoError(t, err)
	defer s.Close()
	l, err := core.NewLimiter(s, []core.Policy{{Name: "outbound", Key: keyfunc.Const("unused"), Limit: core.PerSecond(10).WithBurst(1)}})
	require.NoError(t, err)
	client := &http.Client{Transport: &httplimit.Transport{Limiter: l, Policy: "outbound"}}

	const calls = 6
	var wg sync.WaitGroup
	start := time.Now()
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			if !assertNoErr(t, err) {
				return
			}
			resp, err := client.Do(req)
			if !assertNoErr(t, err) {
				return
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
	require.Len(t, arrived, calls)
	require.GreaterOrEqual(t, time.Since(start), (calls-1)*100*time.Millisecond-20*time.Millisecond)
	mu.Lock()
	for i := 1; i < len(arrived); i++ {
		// The admissions are exactly 100ms apart (booked slots, see
		// core.Limiter.WaitN) and no call is sent before its own, so the
		// server never sees the i-th call before i intervals have passed:
		// the limit, as the receiving end measures it. (Two consecutive
		// arrivals can be closer than 100ms when the earlier one's
		// goroutine woke late.)
		require.GreaterOrEqual(t, arrived[i].Sub(start), time.Duration(i)*100*time.Millisecond, "call %d arrived before its slot", i)
	}
	mu.Unlock()

	// Two more slots booked for the same host (the last call's goroutine
	// may have woken late, so its successor's slot may be near): the next
	// is at least 200ms away, and a 20ms deadline fails at once, unsent,
	// with its body closed.
	for range 2 {
		r, err := l.Reserve(context.Background(), "outbound", strings.TrimPrefix(srv.URL, "http://"), time.Hour)
		require.NoError(t, err)
		require.True(t, r.OK())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	body := &closeTracker{Reader: strings.NewReader("payload")}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, body)
	require.NoError(t, err)
	_, err = client.Do(req)
	require.ErrorIs(t, err, core.ErrWouldExceedDeadline)
	require.True(t, body.closed.Load(), "the body of an unsent request must be closed")
	require.Len(t, arrived, calls, "a request past its deadline was sent")
}

// Key and Cost choose the identity and the units; a key error is returned
// and the request not sent.
func TestTransportKeyAndCost(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	s, err := memorystore.New()
	require.NoError(t, err)
	defer s.Close()
	l, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Const("unused"), Limit: core.PerMinute(3)}})
	require.NoError(t, err)
	tr := &httplimit.Transport{
		Limiter: l, Policy: "p",
		Key: func(r *http.Request) (string, error) {
			if t := r.Header.Get("X-Tenant"); t != "" {
				return t, nil
			}
			return "", keyfunc.ErrNoKey
		},
		Cost: func(*http.Request) int64 { return 3 },
	}
	client := &http.Client{Transport: tr}
	do := func(tenant string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	require.NoError(t, do("a"))
	require.ErrorIs(t, do("a"), core.ErrWouldExceedDeadline, "3 units a minute: the next slot is 60s away")
	require.NoError(t, do("b"))
	require.ErrorIs(t, do(""), keyfunc.ErrNoKey)
	require.EqualValues(t, 2, hits.Load())

	// A cost of 0 counts 1, as the adapters' WithCost: it is not a peek
	// that lets every request through uncounted.
	tr.Cost = func(*http.Request) int64 { return 0 }
	for range 3 {
		require.NoError(t, do("c"))
	}
	require.ErrorIs(t, do("c"), core.ErrWouldExceedDeadline)
	tr.Cost = func(*http.Request) int64 { return -1 }
	require.ErrorIs(t, do("d"), core.ErrInvalidCost)
	tr.Cost = func(*http.Request) int64 { return 3 }
	r, err := l.AllowN(context.Background(), "p", "a", 0)
	require.NoError(t, err)
	require.EqualValues(t, 0, r.Remaining, "the Transport counts under the key the Limiter's Allow sees")
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
