package servicebench

import (
	"fmt"
	"strconv"
)

// Defaults of the scenario.
const (
	// Callers is the number of concurrent callers of the load generator.
	Callers = 64
	// Identities is the number of distinct descriptor values (users) the
	// callers spread over.
	Identities = 1000
	// Domain is the envoyproxy/ratelimit domain of the rules.
	Domain = "sluice-bench"
	// UserKey is the descriptor key of the measured checks: one entry
	// (UserKey, "N") per request, each value its own counter.
	UserKey = "user"
	// Rate is the limit of every user, per second: never reached, so no
	// check of the measured load is denied.
	Rate = 1_000_000
	// TinyKey is a descriptor key limited to TinyLimit per minute, for the
	// check that a server does limit (tests and the readiness probe).
	TinyKey = "tiny"
	// TinyLimit is TinyKey's limit per minute.
	TinyLimit = 5
)

// RulesYAML is the rules file both servers load, in envoyproxy/ratelimit's
// format (ratelimitd tells it apart by its domain: and descriptors: keys).
func RulesYAML() []byte {
	return fmt.Appendf(nil, `# The service benchmark's rules: one counter per user value.
domain: %s
descriptors:
  - key: %s
    rate_limit:
      unit: second
      requests_per_unit: %d
  - key: %s
    rate_limit:
      unit: minute
      requests_per_unit: %d
`, Domain, UserKey, Rate, TinyKey, TinyLimit)
}

// Users returns the n descriptor values of the measured load: "0" … "n-1".
func Users(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}
