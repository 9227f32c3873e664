package ginlimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
)

func newLimiterOn(t *testing.T, s core.Store, ps ...core.Policy) *core.Limiter {
	l, err := core.NewLimiter(s, ps)
	require.NoError(t, err)
	return l
}

// TestUndecidedLogIsRateLimited (issue 12 item 3): a flood of undecided
// requests writes one line per second, not one per request.
func TestUndecidedLogIsRateLimited(t *testing.T) {
	l := newLimiterOn(t, failingStore{errBackend}, ipPolicy(t, "p", core.PerMinute(1)))
	var logs bytes.Buffer
	r := gin.New()
	r.Use(ginlimit.New(l, ginlimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
	r.GET("/", hello)
	start := time.Now()
	for range 500 {
		require.Equal(t, http.StatusOK, get(r, "/", "192.0.2.1:1").Code)
	}
	lines := strings.Count(logs.String(), "request not rate limited")
	require.GreaterOrEqual(t, lines, 1)
	require.LessOrEqual(t, lines, int(time.Since(start)/time.Second)+1, logs.String())
}

// TestPathVariants (issue 12 item 4): every spelling of a path that gin
// serves from a route's handlers is counted by that route's policy, under
// gin's path options.
func TestPathVariants(t *testing.T) {
	variants := []string{"/login", "/LOGIN", "/login/", "//login", "/./login", "/x/../login", "/log%69n", "/%6Cogin",
		"/login?a=1", "/login%2F", "/files/a", "/files/a%2Fb", "/files/a%2fb", "/files/%61", "/files//a", "/files/a/", "/FILES/a"}
	configs := map[string]func(*gin.Engine){
		"default":          func(*gin.Engine) {},
		"RemoveExtraSlash": func(e *gin.Engine) { e.RemoveExtraSlash = true },
		"UseRawPath":       func(e *gin.Engine) { e.UseRawPath = true },
		"UseEscapedPath":   func(e *gin.Engine) { e.UseEscapedPath = true },
		"RedirectFixedPath": func(e *gin.Engine) {
			e.RedirectFixedPath = true
		},
	}
	for name, configure := range configs {
		for _, v := range variants {
			t.Run(name+v, func(t *testing.T) {
				f := newFixture(t)
				l := f.limiter(t,
					core.Policy{Name: "login", Key: keyfunc.Const("all"), Limit: core.PerHour(1), Match: core.Match{Routes: []string{"/login"}}},
					core.Policy{Name: "files", Key: keyfunc.Const("all"), Limit: core.PerHour(1), Match: core.Match{Routes: []string{"/files/*"}}},
				)
				r := gin.New()
				configure(r)
				r.Use(ginlimit.New(l))
				var ran string
				r.GET("/login", func(c *gin.Context) { ran = "login" })
				r.GET("/files/:name", func(c *gin.Context) { ran = "files" })
				w := get(r, v, "192.0.2.1:1")
				if ran == "" {
					require.NotEqual(t, http.StatusOK, w.Code)
					return
				}
				rl := sftest.List(t, w.Header().Get("RateLimit"))
				require.Len(t, rl, 1, "%s reached the %s handler uncounted", v, ran)
				require.Equal(t, ran, rl[0].Name, "%s reached the %s handler", v, ran)
			})
		}
	}
}

// TestPanickingCallbacks (issue 12 item 7): a key function, skip or cost
// callback that panics is an undecided request for the error handler, not
// a crash (no gin.Recovery here).
func TestPanickingCallbacks(t *testing.T) {
	boom := func(keyfunc.Request) (string, error) { panic("boom") }
	cases := map[string][]ginlimit.Option{
		"key":  {ginlimit.WithKey(boom)},
		"skip": {ginlimit.WithSkip(func(*gin.Context) bool { panic("boom") })},
		"cost": {ginlimit.WithCost(func(*gin.Context) int64 { panic("boom") })},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			l := f.limiter(t, ipPolicy(t, "p", core.PerMinute(1)))
			var got error
			opts := append(opts, ginlimit.WithErrorHandler(func(c *gin.Context, err error) bool {
				got = err
				c.Status(http.StatusServiceUnavailable)
				return false
			}))
			r := gin.New()
			r.Use(ginlimit.New(l, opts...))
			r.GET("/", hello)
			for range 3 {
				w := get(r, "/", "192.0.2.1:1")
				if name == "key" && got == nil {
					require.Equal(t, http.StatusOK, w.Code) // the Limiter skipped the policy
					continue
				}
				require.Equal(t, http.StatusServiceUnavailable, w.Code)
				require.ErrorContains(t, got, "panic")
			}
		})
	}
}

// TestDisconnectedClient (issue 12 item 2): a client whose request context
// is cancelled is counted or refused, never run uncounted; real Redis,
// alone and behind a guard.
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
			l := newLimiterOn(t, store, ipPolicy(t, "p", core.PerHour(capacity)))
			var ran atomic.Int32
			r := gin.New()
			r.Use(ginlimit.New(l, ginlimit.WithLogger(slog.New(slog.DiscardHandler))))
			r.GET("/", func(*gin.Context) { ran.Add(1) })
			for range 40 {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				hr := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
				hr.RemoteAddr = "192.0.2.9:1"
				r.ServeHTTP(httptest.NewRecorder(), hr)
			}
			require.LessOrEqual(t, ran.Load(), int32(capacity))
			for range capacity + 2 {
				get(r, "/", "192.0.2.9:1")
			}
			require.LessOrEqual(t, ran.Load(), int32(capacity), "handler runs never exceed what was counted")
			require.Positive(t, ran.Load())
		})
	}
}
