// Command gin is sluice in a Gin server.
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

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/examples/internal/demo"
)

func main() {
	store, name, _ := demo.Store()            // the server runs until it is killed
	hello, login := demo.HelloAndLogin(store) // 10 and 3 requests per minute per client IP

	// One limiter per route, each with its own budget. To limit every route
	// with one limiter instead: r.Use(ginlimit.New(limiter)).
	r := gin.Default()
	r.GET("/hello", ginlimit.New(hello), func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	r.GET("/login", ginlimit.New(login), func(c *gin.Context) { c.String(http.StatusOK, "login form") })
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	addr := demo.Addr(":8080")
	log.Printf("sluice gin example listening on %s, store: %s", addr, name)
	srv := &http.Server{Addr: addr, Handler: r, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
