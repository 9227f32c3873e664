package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Rule is one limit of the service.
type Rule struct {
	// ID is the rule's name and its core.Policy name: 1 to 64 of
	// a-z A-Z 0-9 _ . : - (core.ValidatePolicyName), unique in a snapshot.
	// Counters are kept under it.
	ID string
	// Domain is "" for native rules unless the file sets domain:; for rules
	// read from an Envoy file it is the Envoy domain.
	Domain string
	// Dimension is what a native rule's identifier is: user, ip, api_key or
	// any name. Empty for Envoy rules.
	Dimension string
	// Endpoints are the endpoint patterns of a native rule, in the route
	// syntax of core.Match.Routes ("/api/v1/orders", "/users/:id",
	// "/api/**"); empty means every endpoint.
	Endpoints []string
	// Limit is the rule's limit, valid under core.Limit.Validate, except for
	// an Unlimited rule, whose Limit is the zero value, and a Deny rule
	// (Rate 0).
	Limit core.Limit
	// Tiers maps a tier name to the limit that replaces Limit for callers
	// of that tier (Snapshot.TierOf).
	Tiers map[string]core.Limit
	// Shadow rules are counted and reported but never deny.
	Shadow bool
	// Lease, when positive, is the rule's core.Policy.Lease: ratelimitd
	// decides it in memory from blocks of units taken from its store, each
	// held at most Lease (the rules file's and the admin API's
	// lease_seconds; see package core/lease). Not for a sliding window
	// log, its limit or a tier's.
	Lease time.Duration
	// Unlimited rules (Envoy's unlimited: true) match, never limit and
	// count nothing.
	Unlimited bool
	// Deny rules (Envoy's requests_per_unit: 0, a ban list) match and
	// deny every request (unless Shadow), counting nothing. Their Limit
	// holds Rate 0 with the algorithm and Period of the file (what Envoy's
	// current_limit reports); it is not a valid core.Limit: build no policy
	// from it.
	Deny bool
	// Replaces holds the IDs of the rules this one cancels when both match
	// one request (Envoy's replaces, whose names are resolved to the IDs of
	// every rule of the domain carrying that name; a name no rule carries
	// is kept as written and cancels nothing).
	Replaces []string
	// Envoy is set for rules read from Envoy's format: the descriptor path
	// that reaches the rule and its Envoy-only settings.
	Envoy *EnvoyNode
	// Source is where the rule was written.
	Source Position
}

// Position is a place in a rules file.
type Position struct {
	// File is the file's name as given to the source.
	File string
	// Line is the 1-based line of the rule (0 when unknown).
	Line int
}

// String formats p as FILE:LINE.
func (p Position) String() string { return fmt.Sprintf("%s:%d", p.File, p.Line) }

// EnvoyNode is the place of a rule in an Envoy domain's descriptor tree.
type EnvoyNode struct {
	// Path holds one level per descriptor entry, from the domain's top
	// level to the descriptor carrying the rate_limit. A request's
	// descriptor reaches the rule only with exactly len(Path) entries.
	Path []EnvoyLevel
	// Name is rate_limit.name as written ("" when none); replaces refers
	// to it.
	Name string
	// QuotaMode is Envoy's quota_mode: accepted and kept, not applied (the
	// rule limits as any other).
	QuotaMode bool
	// DetailedMetric and ValueToMetric are Envoy's metric settings, kept for
	// the metrics of the service.
	DetailedMetric, ValueToMetric bool
}

// EnvoyLevel is one level of an Envoy descriptor path.
type EnvoyLevel struct {
	// Key is the descriptor entry's key.
	Key string
	// Value is the value matched: "" for the key alone (any value, one
	// counter per value), a literal, or a prefix pattern ending with "*"
	// such as "foo*" (any value starting with foo; "*" alone: any value).
	Value string
	// ShareThreshold makes every value matching a wildcard Value share one
	// counter (the identity holds the pattern, not the value).
	ShareThreshold bool
}

// wildcard reports whether the level's value is a pattern: it ends with
// "*" (a "*" elsewhere is literal, as in envoyproxy/ratelimit).
func (l EnvoyLevel) wildcard() bool { return strings.HasSuffix(l.Value, "*") }

// Entry is one entry of an Envoy descriptor: a key and its value.
type Entry struct {
	Key, Value string
}
