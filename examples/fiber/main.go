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

	"github.com/gofiber/fiber/v2"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/examples/internal/demo"
)

func main() {
	store, name, _ := demo.Store()            // the server runs until it is killed
	hello, login := demo.HelloAndLogin(store) // 10 and 3 requests per minute per client IP

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	// Per-route middleware: each route counts on its own, and /healthz has
	// none. app.Use(fiberlimit.New(hello)) would limit every route at once.
	app.Get("/hello", fiberlimit.New(hello), func(c *fiber.Ctx) error { return c.SendString("hello") })
	app.Get("/login", fiberlimit.New(login), func(c *fiber.Ctx) error { return c.SendString("login form") })
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok") })

	addr := demo.Addr(":8080")
	log.Printf("sluice fiber example listening on %s, store: %s", addr, name)
	log.Fatal(app.Listen(addr))
}
