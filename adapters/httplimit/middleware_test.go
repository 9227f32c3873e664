package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

type fixture struct {
	now   time.Time
	mu    sync.Mutex
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

func ipPolicy(t *testing.T, name string, l core.Limit) core.Policy {
	ip := keyfunc.IP()
	return core.Policy{Name: name, Key: ip, Limit: l}
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })

func get(h http.Handler, path, remote string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Huge and garbage forwarding headers still get a decision, and a peer
// that is no address fails open (documented), never a shared bucket. (A
// client's spoofed headers and a neighbour: the conformance suite.)
func TestHugeHeadersAndNoPeer(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil, ipPolicy(t, "p", core.PerMinute(1)))
	h := httplimit.New(l)(ok)
	require.Equal(t, 200, get(h, "/", "203.0.113.66:5000").Code)
	huge := strings.Repeat("1.2.3.4, ", 100_000)
	require.Equal(t, 429, get(h, "/", "203.0.113.66:5000", "X-Forwarded-For", huge, "Forwarded", `for="[::1`).Code)
	w := get(h, "/", "not-an-address")
	require.Equal(t, 200, w.Code)
	require.Empty(t, w.Result().Header.Get("RateLimit"))
}
