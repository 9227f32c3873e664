// Command nethttp is sluice in a plain net/http server.
//
//	GET /hello    200 "hello", 10 requests per minute per client IP
//	GET /login    a stricter limit: 3 per minute per client IP
//	GET /healthz  never limited
//
// It listens on $ADDR (default :8080) and keeps its counts in Redis at
// $REDIS_ADDR when set, in memory otherwise.
package main

import (
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/demo"
)

func main() {
	store, name, _ := demo.Store()            // the server runs until it is killed
	hello, login := demo.HelloAndLogin(store) // 10 and 3 requests per minute per client IP

	addr := demo.Addr(":8080")
	log.Printf("sluice net/http example listening on %s, store: %s", addr, name)
	srv := &http.Server{Addr: addr, Handler: routes(hello, login), ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// routes serves the example's three endpoints, /hello and /login behind
// their limiters; opts configure both middlewares.
func routes(hello, login *core.Limiter, opts ...httplimit.Option) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /hello", httplimit.New(hello, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	})))
	mux.Handle("GET /login", httplimit.New(login, opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "login form")
	})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	return mux
}
