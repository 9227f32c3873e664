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
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/examples/internal/demo"
)

func main() {
	store, name, _ := demo.Store()            // the server runs until it is killed
	hello, login := demo.HelloAndLogin(store) // 10 and 3 requests per minute per client IP

	// One limiter per route, each with its own budget. To limit every route
	// with one limiter instead: e.Use(echolimit.New(limiter)).
	e := echo.New()
	e.HideBanner = true
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") }, echolimit.New(hello))
	e.GET("/login", func(c echo.Context) error { return c.String(http.StatusOK, "login form") }, echolimit.New(login))
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })

	addr := demo.Addr(":8080")
	log.Printf("sluice echo example listening on %s, store: %s", addr, name)
	srv := &http.Server{Addr: addr, Handler: e, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
