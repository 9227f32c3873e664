package route_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/route"
)

func TestValidate(t *testing.T) {
	for _, p := range []string{"/", "/api", "/api/**", "/users/:id", "/users/{id}/posts", "/*/x", "/pkg.Service/Method"} {
		require.NoError(t, route.Validate(p), p)
	}
	for _, p := range []string{"", "api", "/api//x", "/api/", "/**/x", "/a*", "/a/b**", "//"} {
		require.Error(t, route.Validate(p), p)
	}
}

func TestSplit(t *testing.T) {
	require.Nil(t, route.Split("/"))
	require.Equal(t, []string{"a", "b", "**"}, route.Split("/a/b/**"))
	require.Equal(t, []string{"a", ""}, route.Split("/a/"))
}

func TestTrie(t *testing.T) {
	var tr route.Trie
	tr.InsertAll(0)
	tr.Insert("/api/**", 1)
	tr.Insert("/api/v1/orders", 2)
	tr.Insert("/api/v1/orders/:id", 3)
	tr.Insert("/users/{id}/posts", 4)
	tr.Insert("/", 5)
	require.Equal(t, 1, tr.NumAll())
	match := func(path string) []int {
		seen := map[int]bool{}
		tr.Match(path, func(i int) { seen[i] = true })
		var out []int
		for i := 0; i < 6; i++ {
			if seen[i] {
				out = append(out, i)
			}
		}
		return out
	}
	require.Equal(t, []int{0, 1}, match("/api"))
	require.Equal(t, []int{0, 1, 2}, match("/api/v1/orders"))
	require.Equal(t, []int{0, 1, 3}, match("/api/v1/orders/7"))
	require.Equal(t, []int{0, 1}, match("/api/v1/orders/7/x"))
	require.Equal(t, []int{0, 4}, match("/users/ann/posts"))
	require.Equal(t, []int{0}, match("/users//posts"))
	require.Equal(t, []int{0, 5}, match("/"))
	require.Equal(t, []int{0}, match("/other"))
}
