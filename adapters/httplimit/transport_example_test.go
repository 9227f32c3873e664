package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// An API client that keeps under its provider's limit of 5 calls a second
// by waiting for its slot instead of sending and getting 429.
func ExampleTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	s, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer s.Close()
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "provider", Key: keyfunc.Const("unused"), Limit: core.PerSecond(5)},
	})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &httplimit.Transport{Limiter: l, Policy: "provider"}}
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// 200
	// 200
	// 200
}
