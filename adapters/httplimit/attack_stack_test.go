package httplimit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

type downStore struct{ core.Store }

func (downStore) Take(_ context.Context, _ []core.Op, _ []core.Result) error {
	return io.ErrUnexpectedEOF
}

// Stacked middlewares where one does not decide: the handler sees the
// Decision of the one that did (not a merge with nothing, not a stale
// one), the headers are its own, and a skipped or undecided middleware
// counts nothing.
func TestAttackStackWithSkippedOrUndecided(t *testing.T) {
	mem, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	newLimiter := func(s core.Store, name string) *core.Limiter {
		l, err := core.NewLimiter(s, []core.Policy{{Name: name, Key: keyfunc.IP(), Limit: core.PerMinute(3)}})
		require.NoError(t, err)
		return l
	}
	quiet := httplimit.WithLogger(slog.New(slog.DiscardHandler))
	skip := httplimit.WithSkip(func(r *http.Request) bool { return r.Header.Get("X-Skip") != "" })
	var seen string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := httplimit.DecisionFrom(r.Context())
		seen = "none"
		if ok {
			seen = ""
			for _, p := range d.Results {
				seen += p.Policy + " "
			}
		}
	})
	for _, tc := range []struct {
		name         string
		outer, inner func(http.Handler) http.Handler
		header       string
		want         string
	}{
		{"inner skipped", httplimit.New(newLimiter(mem, "outer1"), quiet), httplimit.New(newLimiter(mem, "inner1"), quiet, skip), "skip", "outer1 "},
		{"outer skipped", httplimit.New(newLimiter(mem, "outer2"), quiet, skip), httplimit.New(newLimiter(mem, "inner2"), quiet), "skip", "inner2 "},
		{"inner undecided", httplimit.New(newLimiter(mem, "outer3"), quiet), httplimit.New(newLimiter(downStore{mem}, "inner3"), quiet), "", "outer3 "},
		{"outer undecided", httplimit.New(newLimiter(downStore{mem}, "outer4"), quiet), httplimit.New(newLimiter(mem, "inner4"), quiet), "", "inner4 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.outer(tc.inner(handler))
			var remaining []string
			for range 4 {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				if tc.header != "" {
					req.Header.Set("X-Skip", "1")
				}
				w := httptest.NewRecorder()
				seen = ""
				h.ServeHTTP(w, req)
				remaining = append(remaining, w.Header().Get("X-RateLimit-Remaining"))
				if w.Code == http.StatusOK {
					require.Equal(t, tc.want, seen)
				}
			}
			require.Equal(t, []string{"2", "1", "0", "0"}, remaining, "only the deciding middleware counts and sends headers")
		})
	}
}
