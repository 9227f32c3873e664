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
