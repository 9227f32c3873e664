package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// One line limits every route: 3 requests a minute per client address.
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

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.New(limiter))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	for range 4 {
		req := httptest.NewRequest(http.MethodGet, "/hello", nil)
		req.RemoteAddr = "203.0.113.7:51234"
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"), w.Header().Get("X-RateLimit-State"), w.Header().Values("Retry-After"))
	}
	// Output:
	// 200 "per-ip";r=2;t=20 normal []
	// 200 "per-ip";r=1;t=20 normal []
	// 200 "per-ip";r=0;t=20 warning []
	// 429 "per-ip";r=0;t=20 throttled [20]
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

	r := gin.New()
	r.Use(ginlimit.New(limiter("per-ip", core.PerMinute(100)),
		ginlimit.WithSkip(func(c *gin.Context) bool { return c.FullPath() == "/healthz" })))
	r.GET("/healthz", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	r.POST("/login", ginlimit.New(limiter("login", core.PerMinute(3))), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	api := r.Group("/api", ginlimit.New(limiter("api", core.PerSecond(10)), ginlimit.WithKey(keyfunc.Header("X-API-Key"))))
	api.GET("/items", func(c *gin.Context) { c.String(http.StatusOK, "[]") })
}

// FrameworkIP uses gin's c.ClientIP(), which is only as good as the engine's
// trusted proxies: name them, or c.ClientIP() believes any X-Forwarded-For.
func ExampleFrameworkIP() {
	r := gin.New()
	if err := r.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
		panic(err)
	}
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{{Name: "per-ip", Key: ginlimit.FrameworkIP(), Limit: core.PerMinute(10)}})
	if err != nil {
		panic(err)
	}
	r.Use(ginlimit.New(limiter))
	r.GET("/", func(c *gin.Context) {
		d, _ := ginlimit.DecisionFrom(c)
		c.String(http.StatusOK, "%d left", d.Bound().Remaining)
	})

	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "10.0.0.1:4000" // the load balancer
	req.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.7")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	fmt.Println(w.Body.String())
	// Output: 9 left
}
