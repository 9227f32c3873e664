package echolimit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/adapters/internal/adaptertest"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// Echo's own idioms. The behaviour every adapter shares is in the
// conformance suite (conformance_test.go).

func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	return e
}

type req struct {
	method, target, remote string
}

func do(h http.Handler, r req) *httptest.ResponseRecorder {
	if r.method == "" {
		r.method = http.MethodGet
	}
	hr := httptest.NewRequest(r.method, r.target, nil)
	hr.RemoteAddr = r.remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	return w
}

func get(h http.Handler, target, remote string) *httptest.ResponseRecorder {
	return do(h, req{target: target, remote: remote})
}

func hello(c echo.Context) error { return c.String(http.StatusOK, "hello") }

// checkProblem checks that w is the default 429 problem document naming
// the violated policies.
func checkProblem(t *testing.T, w *httptest.ResponseRecorder, violated ...string) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, ratelimitfields.ProblemContentType, w.Header().Get(echo.HeaderContentType))
	require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	var p struct {
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	require.Equal(t, http.StatusTooManyRequests, p.Status)
	require.Equal(t, violated, p.Violated)
}

// A denial goes through e.HTTPErrorHandler: a custom one sees the 429 and
// renders it its own way; one that delegates to Echo's default gets the
// problem document; HEAD gets no body.
func TestDenialTakesTheErrorPath(t *testing.T) {
	l := adaptertest.IPLimiter(t, core.PerMinute(1))

	t.Run("custom error handler", func(t *testing.T) {
		var seen []error
		e := newEcho()
		e.HTTPErrorHandler = func(err error, c echo.Context) {
			seen = append(seen, err)
			var he *echo.HTTPError
			require.ErrorAs(t, err, &he)
			d, ok := echolimit.DecisionFrom(c)
			require.True(t, ok)
			require.False(t, d.Allowed)
			require.NoError(t, c.String(he.Code, fmt.Sprintf("%v", he.Message)))
		}
		e.Use(echolimit.New(l))
		e.GET("/", hello)
		require.Equal(t, http.StatusOK, get(e, "/", "203.0.113.1:1").Code)
		w := get(e, "/", "203.0.113.1:1")
		require.Len(t, seen, 1)
		require.Equal(t, http.StatusTooManyRequests, seen[0].(*echo.HTTPError).Code)
		require.Equal(t, "code=429, message=Too Many Requests", seen[0].Error())
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		require.Equal(t, "Too Many Requests", w.Body.String())
		require.Equal(t, echo.MIMETextPlainCharsetUTF8, w.Header().Get(echo.HeaderContentType), "not relabelled")
		require.Equal(t, "60", w.Header().Get("Retry-After"))
		require.Equal(t, "throttled", w.Header().Get("X-RateLimit-State"))
	})

	t.Run("custom error handler delegating to the default", func(t *testing.T) {
		var logged atomic.Int32
		e := newEcho()
		e.HTTPErrorHandler = func(err error, c echo.Context) {
			logged.Add(1)
			e.DefaultHTTPErrorHandler(err, c)
		}
		e.Use(echolimit.New(l))
		e.GET("/", hello)
		get(e, "/", "203.0.113.2:1")
		checkProblem(t, get(e, "/", "203.0.113.2:1"), "per-ip")
		require.EqualValues(t, 1, logged.Load())
	})

	t.Run("debug mode indents", func(t *testing.T) {
		e := newEcho()
		e.Debug = true
		e.Use(echolimit.New(l))
		e.GET("/", hello)
		get(e, "/", "203.0.113.3:1")
		w := get(e, "/", "203.0.113.3:1")
		checkProblem(t, w, "per-ip")
		require.Contains(t, w.Body.String(), "\n  \"title\"")
	})

	t.Run("HEAD", func(t *testing.T) {
		e := newEcho()
		e.Use(echolimit.New(l))
		e.HEAD("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		do(e, req{method: http.MethodHead, target: "/", remote: "203.0.113.4:1"})
		w := do(e, req{method: http.MethodHead, target: "/", remote: "203.0.113.4:1"})
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		require.Empty(t, w.Body.String())
		require.Equal(t, "60", w.Header().Get("Retry-After"))
		// As in every other adapter.
		require.Equal(t, ratelimitfields.ProblemContentType, w.Header().Get(echo.HeaderContentType))
		require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	})

	// A custom handler that puts the problem inside its own JSON envelope
	// writes a body that is not a problem document: it must not be
	// labelled application/problem+json.
	t.Run("custom JSON envelope is not relabelled", func(t *testing.T) {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			e := newEcho()
			e.HTTPErrorHandler = func(err error, c echo.Context) {
				var he *echo.HTTPError
				require.ErrorAs(t, err, &he)
				if c.Request().Method == http.MethodHead {
					require.NoError(t, c.NoContent(he.Code))
					return
				}
				require.NoError(t, c.JSON(he.Code, map[string]any{"error": he.Message, "app": "mine"}))
			}
			e.Use(echolimit.New(l))
			e.Any("/", hello)
			remote := "203.0.113.9:1"
			if method == http.MethodHead {
				remote = "203.0.113.10:1"
			}
			do(e, req{method: method, target: "/", remote: remote})
			w := do(e, req{method: method, target: "/", remote: remote})
			require.Equal(t, http.StatusTooManyRequests, w.Code, method)
			require.NotEqual(t, ratelimitfields.ProblemContentType, w.Header().Get(echo.HeaderContentType), method)
			require.Equal(t, "no-store", w.Header().Get("Cache-Control"), "a 429 is never stored (%s)", method)
			if method == http.MethodGet {
				require.Equal(t, echo.MIMEApplicationJSON, w.Header().Get(echo.HeaderContentType))
				require.Contains(t, w.Body.String(), `"app":"mine"`)
				require.Contains(t, w.Body.String(), `"error":{"type":`)
			}
		}
	})

	t.Run("other middleware sees the error", func(t *testing.T) {
		var got error
		e := newEcho()
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error { got = next(c); return got }
		})
		e.Use(echolimit.New(l))
		e.GET("/", hello)
		get(e, "/", "203.0.113.5:1")
		checkProblem(t, get(e, "/", "203.0.113.5:1"), "per-ip")
		require.ErrorAs(t, got, new(*echo.HTTPError))
	})
}

// Outside the middleware there is no Decision.
func TestOutsideTheMiddleware(t *testing.T) {
	c := newEcho().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	_, ok := echolimit.DecisionFrom(c)
	require.False(t, ok)
}

func TestNilLimiter(t *testing.T) {
	require.PanicsWithValue(t, "echolimit.New: nil limiter", func() { echolimit.New(nil) })
}
