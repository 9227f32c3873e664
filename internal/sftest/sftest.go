// Package sftest reads the rate-limit headers sluice sends (RateLimit and
// RateLimit-Policy) with an independent RFC 9651 Structured Field parser,
// github.com/dunglas/httpsfv, so that the adapters' tests check the wire
// format against someone else's reading of the RFC rather than their own.
// It is imported by tests only.
package sftest

import (
	"testing"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/require"
)

// Member is one member of a List whose members are Strings with Integer
// parameters: the shape of both RateLimit-Policy and RateLimit.
type Member struct {
	// Name is the member's String value (a policy name).
	Name string
	// Params maps each parameter's key to its Integer value.
	Params map[string]int64
}

// List parses the field lines v (one or more, as http.Header.Values returns
// them) as a List of Strings with Integer parameters, failing t on anything
// RFC 9651 rejects or on any other shape (a Token, an Inner List, a
// parameter that is not an Integer).
func List(t testing.TB, v ...string) []Member {
	t.Helper()
	l, err := httpsfv.UnmarshalList(v)
	require.NoError(t, err, "not an RFC 9651 List: %q", v)
	out := make([]Member, 0, len(l))
	for i, m := range l {
		it, ok := m.(httpsfv.Item)
		require.True(t, ok, "member %d of %q is not an Item: %T", i, v, m)
		name, ok := it.Value.(string)
		require.True(t, ok, "member %d of %q is not a String: %T", i, v, it.Value)
		mem := Member{Name: name, Params: map[string]int64{}}
		for _, k := range it.Params.Names() {
			pv, _ := it.Params.Get(k)
			n, ok := pv.(int64)
			require.True(t, ok, "parameter %q of member %d of %q is not an Integer: %T", k, i, v, pv)
			mem.Params[k] = n
		}
		out = append(out, mem)
	}
	return out
}
