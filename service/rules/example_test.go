package rules_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/service/rules"
)

// Our format: rules by dimension and endpoint, with tiers.
func ExampleParse() {
	s, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: orders-per-user
    dimension: user
    endpoint_pattern: [/api/v1/orders, /api/v1/orders/*]
    algorithm: sliding_window_counter
    limit: 100
    window_seconds: 60
    tiers: {pro: {algorithm: sliding_window_counter, limit: 1000, window_seconds: 60}}
  - name: per-ip
    dimension: ip
    limit: 50
    window_seconds: 1
tier_assignments:
  user: {alice: pro}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range s.Match("", "user", "/api/v1/orders/42") {
		fmt.Println(r.ID, r.Limit, r.Tiers[s.TierOf("user", "alice")])
	}
	fmt.Println(len(s.Match("", "user", "/health")))
	// Output:
	// orders-per-user 100/1m0s sliding_window_counter 1000/1m0s sliding_window_counter
	// 0
}

// A caller deciding many checks matches each into a buffer of its own, so
// that matching allocates nothing while the rules fit in it.
func ExampleSnapshot_AppendMatch() {
	s, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: orders-per-user
    dimension: user
    endpoint_pattern: /api/v1/orders/*
    limit: 100
    window_seconds: 60
  - name: per-user
    dimension: user
    limit: 1000
    window_seconds: 60
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	var buf [8]*rules.Rule
	for _, endpoint := range []string{"/api/v1/orders/42", ""} {
		for _, r := range s.AppendMatch(buf[:0], "", "user", endpoint) {
			fmt.Printf("%q: %s\n", endpoint, r.ID)
		}
	}
	// Output:
	// "/api/v1/orders/42": orders-per-user
	// "/api/v1/orders/42": per-user
	// "": per-user
}

// Every error of a file is reported, each naming file:line:field.
func ExampleParse_errors() {
	_, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: orders
    dimension: user
    limit: 0
    window_seconds: 60
    endpoint: /api
`))
	fmt.Println(err)
	// Output:
	// rules file rules.yaml:7: rules[0].endpoint: unknown field (known: name, dimension, endpoint_pattern, algorithm, limit, window_seconds, burst, tiers, shadow, lease_seconds, domain)
	// rules file rules.yaml:5: rules[0].limit: must be a whole number >= 1, got "0"
}

// envoyproxy/ratelimit's format, matched as envoyproxy/ratelimit matches.
func ExampleSnapshot_MatchDescriptor() {
	s, err := rules.Parse("messaging.yaml", []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	r, identity, ok := s.MatchDescriptor("messaging", []rules.Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}})
	fmt.Println(ok, r.ID, r.Limit, identity)
	_, _, ok = s.MatchDescriptor("messaging", []rules.Entry{{Key: "message_type", Value: "marketing"}})
	fmt.Println(ok)
	// Output:
	// true messaging.message_type_marketing.to_number 5/24h0m0s fixed_window messaging|message_type=marketing|to_number=2061111111
	// false
}

// A file source: Load, then Watch for edits.
func ExampleNewFile() {
	dir, err := os.MkdirTemp("", "rules")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, rules.Example(), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	src := rules.NewFile(path)
	s, err := src.Load(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range s.Rules() {
		fmt.Println(r.ID, r.Dimension, r.Endpoints, r.Limit)
	}
	// Then, in the server: go src.Watch(ctx, apply, onError).

	// Output:
	// api-per-user user [/api/**] 10/1m0s sliding_window_counter
	// login-per-ip ip [/login] 5/1m0s fixed_window
	// requests-per-api-key api_key [] 20/1s token_bucket burst=40
}
