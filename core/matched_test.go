package core_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// Among many routed policies, a request gets exactly the policies whose
// routes match its path, in policy order, each once even when several of
// its patterns match (the route trie reports a literal match after a
// "/**" one of a later policy, and a policy once per matching pattern).
func TestMatchedAmongManyPolicies(t *testing.T) {
	s, _ := frozen(t)
	k := keyfunc.Const("k")
	var ps []core.Policy
	for i := range 200 {
		ps = append(ps, core.Policy{Name: fmt.Sprint("other", i), Key: k, Limit: core.PerHour(10),
			Match: core.Match{Routes: []string{fmt.Sprintf("/s%d/**", i)}}})
	}
	ps = append(ps,
		core.Policy{Name: "literal", Key: k, Limit: core.PerHour(10), Match: core.Match{Routes: []string{"/o/x"}}},
		core.Policy{Name: "twice", Key: k, Limit: core.PerHour(10), Match: core.Match{Routes: []string{"/o/**", "/o/:id", "/p"}}},
		core.Policy{Name: "posts", Key: k, Limit: core.PerHour(10), Match: core.Match{Methods: []string{"POST"}, Routes: []string{"/o/*"}}},
		core.Policy{Name: "every", Key: k, Limit: core.PerHour(10)},
	)
	l, err := core.NewLimiter(s, ps)
	require.NoError(t, err)
	for _, c := range []struct {
		method, path string
		want         []string
	}{
		{"GET", "/o/x", []string{"literal", "twice", "every"}},
		{"POST", "/o/x", []string{"literal", "twice", "posts", "every"}},
		{"GET", "/o/y", []string{"twice", "every"}},
		{"GET", "/s7/a/b", []string{"other7", "every"}},
		{"GET", "/nothing", []string{"every"}},
	} {
		d, err := l.Check(context.Background(), keyfunc.Static{MethodName: c.method, PathName: c.path})
		require.NoError(t, err)
		require.Equal(t, c.want, names(d), "%s %s", c.method, c.path)
	}
	// "twice" was taken once per request that matched it (3), not once per
	// matching pattern.
	d, err := l.Peek(context.Background(), keyfunc.Static{MethodName: "GET", PathName: "/o/z"})
	require.NoError(t, err)
	require.Equal(t, []string{"twice", "every"}, names(d))
	require.Equal(t, int64(10-3), d.Results[0].Remaining)
}
