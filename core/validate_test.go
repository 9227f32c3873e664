package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// A method list that would silently match nothing
// (or everything by accident) is an error naming the field.
func TestMethodsAreTokens(t *testing.T) {
	s, _ := frozen(t)
	bad := []string{"ANY", "any", "All", "GET,POST", "GET POST", "GET ", " GET", "", "GET\tPOST", "Get", "GÉT", "GET;", "(GET)", "/"}
	for _, m := range bad {
		_, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerHour(1), Match: core.Match{Methods: []string{"GET", m}}}})
		require.ErrorContains(t, err, `policy "p": Match.Methods[1]:`, "%q", m)
		require.Error(t, core.ValidateMethod(m), "%q", m)
	}
	good := []string{"GET", "get", "POST", "PROPFIND", "M-SEARCH", "*", "BREW"}
	for _, m := range good {
		require.NoError(t, core.ValidateMethod(m), "%q", m)
	}
	// "*" matches every method.
	l, err := core.NewLimiter(s, []core.Policy{{Name: "star", Key: keyfunc.Const("k"), Limit: core.PerHour(2), Match: core.Match{Methods: []string{"*"}}}})
	require.NoError(t, err)
	for i, m := range []string{"GET", "DELETE", "PURGE"} {
		d, err := l.Check(context.Background(), keyfunc.Static{MethodName: m})
		require.NoError(t, err)
		require.True(t, d.Limited(), m)
		require.Equal(t, i < 2, d.Allowed, m)
	}
}

func TestTierNamedEmptyIsAnError(t *testing.T) {
	s, _ := frozen(t)
	_, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerHour(1), Tiers: map[string]core.Limit{"": core.PerHour(1000)}}},
		core.WithTiering(core.Tiering{Key: keyfunc.Const("k"), Resolve: func(context.Context, string) (string, error) { return "", nil }}))
	require.ErrorContains(t, err, `policy "p": Tiers: a tier named ""`)
}

// Strings that alias a request's buffers (Fiber's
// do) are copied where the Limiter keeps them. The tier cache is keyed by
// the caller's identity: a buffer overwritten after the request must not
// change what the cache holds.
func TestTierCacheCopiesKeys(t *testing.T) {
	s, _ := frozen(t)
	var buf []byte // each request's own buffer, scribbled over after it
	aliased := func(keyfunc.Request) (string, error) { return unsafe.String(&buf[0], len(buf)), nil }
	var resolved atomic.Int64
	l, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Header("U"), Limit: core.PerHour(1), Tiers: map[string]core.Limit{"gold": core.PerHour(100)}}},
		core.WithTiering(core.Tiering{Key: aliased, Resolve: func(_ context.Context, id string) (string, error) {
			resolved.Add(1)
			if id == "alice" {
				return "gold", nil
			}
			return "", nil
		}}))
	require.NoError(t, err)
	check := func(who string) core.Decision {
		buf = []byte(who)
		d, err := l.Check(context.Background(), keyfunc.Static{Headers: map[string][]string{"U": {who}}})
		require.NoError(t, err)
		copy(buf, "#####") // the framework reuses the buffer
		return d
	}
	require.Equal(t, "gold", check("alice").Results[0].Tier)
	require.Equal(t, "", check("bobby").Results[0].Tier)     // the buffer now says bobby
	require.Equal(t, "gold", check("alice").Results[0].Tier) // alice is still cached
	require.Equal(t, "", check("bobby").Results[0].Tier)
	require.Equal(t, int64(2), resolved.Load(), "each identity resolved once, then served from the cache")
}
