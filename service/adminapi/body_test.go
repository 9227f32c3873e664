package adminapi

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

func ptr[T any](v T) *T { return &v }

// fieldsOf is the fields an apiError names, in order.
func fieldsOf(e *apiError) []string {
	if e == nil {
		return nil
	}
	var out []string
	for _, f := range e.fields {
		out = append(out, f.Field)
	}
	return out
}

// TestRuleBodyNamesEveryField: a rule body's check names every field at
// fault, in the order of the members, with the API's own messages, and
// reads a good body into the rule as given.
func TestRuleBodyNamesEveryField(t *testing.T) {
	e := func(b ruleBody, pathID string) *apiError {
		_, err := b.rule(pathID)
		return err
	}
	err := e(ruleBody{}, "")
	require.Equal(t, []string{"id", "dimension", "algorithm", "limit", "window_seconds"}, fieldsOf(err))
	require.Equal(t, "id: required; dimension: required (user, ip, api_key or any name); "+
		"algorithm: required (token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, gcra); "+
		"limit: required: the number of requests per window; window_seconds: required: the window in seconds", err.detail)

	err = e(ruleBody{ID: ptr("y"), Dimension: ptr("user"), Algorithm: ptr("gcra"), Limit: ptr[int64](1), WindowSeconds: ptr[int64](1)}, "x")
	require.Equal(t, `id: "y" differs from the path's "x" (a rule's id cannot change)`, err.detail)

	err = e(ruleBody{
		ID: ptr("a b"), Name: ptr("a\x01"), Dimension: ptr("bad dim"), EndpointPattern: ptr(strings.Repeat("x", 5000)),
		Tier: ptr(" gold"), Algorithm: ptr("fast"), Limit: ptr[int64](0), WindowSeconds: ptr[int64](maxWindow + 1), Burst: ptr[int64](-1),
	}, "")
	require.Equal(t, []string{"id", "name", "dimension", "endpoint_pattern", "tier", "algorithm", "limit", "window_seconds", "burst"}, fieldsOf(err))
	for _, m := range []string{
		"name: must not contain control characters", "endpoint_pattern: longer than 2048 bytes", "tier: must not be blank or start or end with spaces",
		`algorithm: "fast" is not one of`, "limit: must be at least 1, got 0", "window_seconds: must be 1 to 3153600000 (100 years), got 3153600001",
		"burst: must not be negative, got -1",
	} {
		require.Contains(t, err.detail, m)
	}

	err = e(ruleBody{ID: ptr("a"), Dimension: ptr("user"), Algorithm: ptr("fixed_window"), Limit: ptr[int64](5), WindowSeconds: ptr[int64](60), Burst: ptr[int64](3)}, "")
	require.Equal(t, []string{"burst"}, fieldsOf(err), "the limit is checked once the fields are")

	r, err := (&ruleBody{ID: ptr("a"), Name: ptr("A"), Dimension: ptr("user"), EndpointPattern: ptr("/a/**"), Tier: ptr("gold"), Algorithm: ptr("token_bucket"),
		Limit: ptr[int64](5), WindowSeconds: ptr[int64](60), Burst: ptr[int64](9), Shadow: ptr(true), Enabled: ptr(false)}).rule("")
	require.Nil(t, err)
	require.Equal(t, rulesdb.Rule{ID: "a", Name: "A", Dimension: "user", EndpointPattern: "/a/**", Tier: "gold", Algorithm: "token_bucket",
		Limit: 5, WindowSeconds: 60, Burst: 9, Shadow: true, Enabled: false}, r)
	r, err = (&ruleBody{Dimension: ptr("user"), Algorithm: ptr("gcra"), Limit: ptr[int64](5), WindowSeconds: ptr[int64](60)}).rule("p")
	require.Nil(t, err)
	require.Equal(t, "p", r.ID, "the path's id")
	require.True(t, r.Enabled, "enabled unless given")
}

// TestOverrideBodyNamesEveryField: an override body's check names every
// field at fault, in order, and reads a good body's expiry from either
// member.
func TestOverrideBodyNamesEveryField(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	e := func(b overrideBody) *apiError {
		_, err := b.override("user", "ann", now)
		return err
	}
	require.Equal(t, "rule_id: required: the rule to override; limit: required (or \"block\": true); "+
		"window_seconds: required (or \"block\": true); expires_at: required: expires_at (RFC 3339) or ttl_seconds", e(overrideBody{}).detail)
	require.Equal(t, "limit: a block has no limit: leave it out; window_seconds: a block has no window: leave it out; ttl_seconds: give expires_at or ttl_seconds, not both",
		e(overrideBody{RuleID: ptr("r"), Block: ptr(true), Limit: ptr[int64](1), WindowSeconds: ptr[int64](1), TTLSeconds: ptr[int64](1), ExpiresAt: ptr("x")}).detail)
	err := e(overrideBody{RuleID: ptr("a b"), Limit: ptr[int64](0), WindowSeconds: ptr[int64](0), TTLSeconds: ptr[int64](0)})
	require.Equal(t, []string{"rule_id", "limit", "window_seconds", "ttl_seconds"}, fieldsOf(err))
	require.Contains(t, err.detail, "limit: must be at least 1, got 0; window_seconds: must be 1 to 3153600000, got 0; ttl_seconds: must be 1 to 2592000 (30 days), got 0")
	for in, want := range map[string]string{
		"tomorrow":                      `expires_at: must be an RFC 3339 time (2026-11-24T12:00:00Z), got "tomorrow"`,
		"2026-05-01T12:00:00Z":          "expires_at: must be in the future, got 2026-05-01T12:00:00Z",
		"2026-06-01T12:00:00Z":          "expires_at: must be at most 30 days ahead, got 2026-06-01T12:00:00Z",
		"2026-05-01T15:00:00.5+02:00":   "",
		"2026-05-31T12:00:00Z":          "",
		"2026-05-31T12:00:00.000001Z":   "expires_at: must be at most 30 days ahead, got 2026-05-31T12:00:00Z",
		"2026-05-01T12:00:00.000001Z":   "",
		"2026-05-01T11:59:59.999999Z":   "expires_at: must be in the future, got 2026-05-01T11:59:59Z",
		"2026-05-01T12:00:00.000001+00": `expires_at: must be an RFC 3339 time (2026-11-24T12:00:00Z), got "2026-05-01T12:00:00.000001+00"`,
	} {
		o, err := (&overrideBody{RuleID: ptr("r"), Block: ptr(true), ExpiresAt: ptr(in)}).override("user", "ann", now)
		if want == "" {
			require.Nil(t, err, in)
			at, _ := time.Parse(time.RFC3339Nano, in)
			require.Equal(t, rulesdb.Override{Dimension: "user", Identifier: "ann", RuleID: "r", Block: true, ExpiresAt: at.UTC()}, o)
			continue
		}
		require.Equal(t, want, err.detail, in)
	}
	o, err := (&overrideBody{RuleID: ptr("r"), Limit: ptr[int64](7), WindowSeconds: ptr[int64](60), TTLSeconds: ptr[int64](90)}).override("user", "ann", now)
	require.Nil(t, err)
	require.Equal(t, rulesdb.Override{Dimension: "user", Identifier: "ann", RuleID: "r", Limit: 7, WindowSeconds: 60, ExpiresAt: now.Add(90 * time.Second)}, o)
}
