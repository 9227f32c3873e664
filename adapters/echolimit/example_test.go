package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// One line limits every route: 3 requests a minute per client address. The
// fourth request is denied through Echo's error handler, which writes the
// problem document.
func ExampleNew() {
	// A stopped clock keeps the output the same on every run; a real app
	// calls memorystore.New() and lets time pass.
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ip := keyfunc.IP()
	limiter, err := core.NewLimiter(store, []core.Policy{{Name: "per-ip", Key: ip, Limit: core.PerMinute(3)}})
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.Use(echolimit.New(limiter))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })

	for range 4 {
		req := httptest.NewRequest(http.MethodGet, "/hello", nil)
		req.RemoteAddr = "203.0.113.7:51234"
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"), w.Header().Get("X-RateLimit-State"), w.Header().Values("Retry-After"))
		if w.Code == http.StatusTooManyRequests {
			fmt.Print(w.Header().Get("Content-Type"), " ", w.Body.String())
		}
	}
	// Output:
	// 200 "per-ip";r=2;t=20 normal []
	// 200 "per-ip";r=1;t=20 normal []
	// 200 "per-ip";r=0;t=20 warning []
	// 429 "per-ip";r=0;t=20 throttled [20]
	// application/problem+json {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded; retry in 20 seconds.","violated-policies":["per-ip"]}
}

// A custom HTTPErrorHandler sees a denial as an *echo.HTTPError with Code 429
// and the Decision in the context; the rate-limit headers are already set.
func ExampleDeniedHandler() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{{Name: "per-user", Key: keyfunc.Header("X-User"), Limit: core.PerMinute(1)}})
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if he, ok := err.(*echo.HTTPError); ok && he.Code == http.StatusTooManyRequests {
			d, _ := echolimit.DecisionFrom(c)
			_ = c.String(he.Code, fmt.Sprintf("slow down, %s: %d left\n", c.Request().Header.Get("X-User"), d.Bound().Remaining))
			return
		}
		e.DefaultHTTPErrorHandler(err, c)
	}
	e.Use(echolimit.New(limiter))
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })

	for range 2 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Print(w.Code, " ", w.Header().Get("Retry-After"), " ", w.Body.String())
	}
	// Output:
	// 204  429 60 slow down, alice: 0 left
}

// A stricter limit on one route, counted by API key on a group, and a health
// check that is never limited.
func ExampleWithKey() {
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ip := keyfunc.IP()
	limiter := func(name string, l core.Limit) *core.Limiter {
		lim, err := core.NewLimiter(store, []core.Policy{{Name: name, Key: ip, Limit: l}})
		if err != nil {
			panic(err)
		}
		return lim
	}
	ok := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }

	e := echo.New()
	e.Use(echolimit.New(limiter("per-ip", core.PerMinute(100)),
		echolimit.WithSkip(func(c echo.Context) bool { return c.Path() == "/healthz" })))
	e.GET("/healthz", ok)
	e.POST("/login", ok, echolimit.New(limiter("login", core.PerMinute(3))))
	api := e.Group("/api", echolimit.New(limiter("api", core.PerSecond(10)), echolimit.WithKey(keyfunc.Header("X-API-Key"))))
	api.GET("/items", ok)
}

// FrameworkIP uses Echo's c.RealIP(), which is only as good as e.IPExtractor:
// without one, any client can choose its key with X-Forwarded-For.
func ExampleFrameworkIP() {
	e := echo.New()
	e.IPExtractor = echo.ExtractIPDirect() // no proxy in front of this app
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{{Name: "per-ip", Key: echolimit.FrameworkIP(), Limit: core.PerMinute(10)}})
	if err != nil {
		panic(err)
	}
	e.Use(echolimit.New(limiter))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, c.RealIP()) })

	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "203.0.113.7:4000"
	req.Header.Set("X-Forwarded-For", "198.51.100.1") // forged: ignored
	w := httptest.NewRecorder()
	e.ServeHTTP(w, req)
	fmt.Println(w.Body.String(), w.Header().Get("X-RateLimit-Remaining"))
	// Output: 203.0.113.7 9
}
