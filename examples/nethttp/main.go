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
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/adapters/httplimit"
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

	mux := http.NewServeMux()
	mux.Handle("GET /hello", httplimit.New(hello)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	})))
	mux.Handle("GET /login", httplimit.New(login)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "login form")
	})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })

	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":8080"
	}
	log.Printf("sluice net/http example listening on %s, store: %s", addr, name)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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
