// Command echo is sluice in an Echo v4 server.
//
//	GET /hello    200 "hello", 10 requests per minute per client IP
//	GET /login    a stricter limit: 3 per minute per client IP
//	GET /healthz  never limited
//
// It listens on $ADDR (default :8080) and keeps its counts in Redis at
// $REDIS_ADDR when set, in memory otherwise.
package main

import (
	"log"
	"net/http"
	"os"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/keyfunc"
)

func main() {
	store, name := openStore()
	clientIP, err := keyfunc.IP() // the transport peer; see keyfunc.TrustProxies behind a proxy
	if err != nil {
		log.Fatal(err)
	}
	hello := mustLimiter(store, core.Policy{Name: "hello", Key: clientIP, Limit: core.PerMinute(10)})
	login := mustLimiter(store, core.Policy{Name: "login", Key: clientIP, Limit: core.PerMinute(3)})

	// One limiter per route, each with its own budget. To limit every route
	// with one limiter instead: e.Use(echolimit.New(limiter)).
	e := echo.New()
	e.HideBanner = true
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") }, echolimit.New(hello))
	e.GET("/login", func(c echo.Context) error { return c.String(http.StatusOK, "login form") }, echolimit.New(login))
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })

	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":8080"
	}
	log.Printf("sluice echo example listening on %s, store: %s", addr, name)
	srv := &http.Server{Addr: addr, Handler: e, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

func openStore() (core.Store, string) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		s, err := redisstore.New(client)
		if err != nil {
			log.Fatal(err)
		}
		return s, "redis at " + addr
	}
	s, err := memorystore.New()
	if err != nil {
		log.Fatal(err)
	}
	return s, "memory"
}

func mustLimiter(s core.Store, p core.Policy) *core.Limiter {
	l, err := core.NewLimiter(s, []core.Policy{p})
	if err != nil {
		log.Fatal(err)
	}
	return l
}
