package apiclient_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/apiclient"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/rules"
)

// Three checks of one IP against a rule of 2 per minute through the
// generated client, on the check API served on loopback: allowed,
// allowed, denied.
func Example() {
	ctx := context.Background()
	st, err := memorystore.New()
	if err != nil {
		panic(err)
	}
	defer st.Close()
	e, err := engine.New(ctx, st, rules.NewBytes("rules.yaml", []byte(`
rules:
  - name: per-ip
    dimension: ip
    algorithm: fixed_window
    rate: 2
    period: 1m
`)))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle(httpapi.Path, httpapi.New(e))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	c, err := apiclient.NewClientWithResponses(srv.URL)
	if err != nil {
		panic(err)
	}
	for range 3 {
		res, err := c.DecideCheckWithResponse(ctx, nil, apiclient.CheckRequest{KeyType: "ip", KeyValue: "203.0.113.7"})
		if err != nil {
			panic(err)
		}
		d := res.JSON200
		fmt.Println(res.StatusCode(), d.Allowed, d.Rule, *d.Remaining)
	}
	// Output:
	// 200 true per-ip 1
	// 200 true per-ip 0
	// 200 false per-ip 0
}
