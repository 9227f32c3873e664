// Command fiber is sluice in a Fiber v2 server.
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
	"os"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
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

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	// Per-route middleware: each route counts on its own, and /healthz has
	// none. app.Use(fiberlimit.New(hello)) would limit every route at once.
	app.Get("/hello", fiberlimit.New(hello), func(c *fiber.Ctx) error { return c.SendString("hello") })
	app.Get("/login", fiberlimit.New(login), func(c *fiber.Ctx) error { return c.SendString("login form") })
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok") })

	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":8080"
	}
	log.Printf("sluice fiber example listening on %s, store: %s", addr, name)
	log.Fatal(app.Listen(addr))
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
