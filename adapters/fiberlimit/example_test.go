package fiberlimit_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// Two requests per minute per client address; the third is refused with
// 429, Retry-After and a problem+json body.
func Example() {
	// A stopped clock keeps the output the same on every run; leave
	// WithClock out in a real program.
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	clientIP := keyfunc.IP() // the transport peer; see keyfunc.TrustProxies behind a proxy
	limiter, err := core.NewLimiter(store, []core.Policy{{Name: "per-ip", Key: clientIP, Limit: core.PerMinute(2)}})
	if err != nil {
		panic(err)
	}

	app := fiber.New()
	app.Use(fiberlimit.New(limiter))
	app.Get("/hello", func(c *fiber.Ctx) error {
		d, _ := fiberlimit.DecisionFrom(c)
		return c.SendString("hello, state " + d.State().String())
	})

	for range 3 {
		res, err := app.Test(httptest.NewRequest("GET", "/hello", nil), -1)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", res.StatusCode, res.Header.Get("RateLimit"), res.Header.Get("Retry-After"))
		fmt.Println(strings.TrimSpace(string(body)))
	}
	// Output:
	// 200 RateLimit: "per-ip";r=1;t=30 Retry-After: ""
	// hello, state normal
	// 200 RateLimit: "per-ip";r=0;t=30 Retry-After: ""
	// hello, state warning
	// 429 RateLimit: "per-ip";r=0;t=30 Retry-After: "30"
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded; retry in 30 seconds.","violated-policies":["per-ip"]}
}

// Per-route limits, and a key other than the policy's: an API key on one
// route, the client address on another, and a route that is never limited.
func ExampleWithKey() {
	store, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	clientIP := keyfunc.IP()
	search, err := core.NewLimiter(store, []core.Policy{{Name: "search", Key: clientIP, Limit: core.PerMinute(30)}})
	if err != nil {
		panic(err)
	}
	api, err := core.NewLimiter(store, []core.Policy{{Name: "api", Key: clientIP, Limit: core.PerSecond(100)}})
	if err != nil {
		panic(err)
	}

	app := fiber.New()
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok") })
	app.Get("/search", fiberlimit.New(search), func(c *fiber.Ctx) error { return c.SendString("results") })
	v1 := app.Group("/v1", fiberlimit.New(api, fiberlimit.WithKey(keyfunc.Hash(keyfunc.Header("X-API-Key")))))
	v1.Get("/items", func(c *fiber.Ctx) error { return c.SendString("items") })

	req := httptest.NewRequest("GET", "/v1/items", nil)
	req.Header.Set("X-API-Key", "k-123")
	res, err := app.Test(req, -1)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.StatusCode, res.Header.Get("RateLimit-Policy"))
	// Output: 200 "api";q=100;w=1
}
