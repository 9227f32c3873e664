package middleware

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConforms(t *testing.T) {
	for _, tc := range []struct {
		tmpl, path string
		want       bool
	}{
		{"/login", "/login", true},
		{"/login", "/LOGIN", false},
		{"/login", "/login/", false},
		{"/login", "//login", false},
		{"/users/:id", "/users/42", true},
		{"/users/:id", "/users/", false},
		{"/users/:id", "/users/42/x", false},
		{"/files/*filepath", "/files/a/b/c", true},
		{"/files/*", "/files/", true},
		{"/", "/", true},
		{"/", "", false},
		{"/a/:b/c", "/a/x/c", true},
		{"/a/:b/c", "/a//c", false},
	} {
		require.Equal(t, tc.want, Conforms(tc.tmpl, tc.path), "%s %s", tc.tmpl, tc.path)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { Conforms("/users/:id/posts", "/users/42/posts") }))
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"/login": "/login", "//login": "/login", "/./login": "/login", "/a/../login": "/login",
		"/login/": "/login/", "/login//": "/login/", "": "/", "login": "/login", "/": "/",
	} {
		require.Equal(t, want, CleanPath(in), in)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { CleanPath("/users/42/posts") }))
}

func TestRoutedPath(t *testing.T) {
	for in, want := range map[string]string{
		"/login":          "/login",
		"/log%69n":        "/login",
		"/files/a%2Fb":    "/files/a%2Fb",
		"/files/a%2fb/c":  "/files/a%2Fb/c",
		"/a%20b":          "/a b",
		"/users/42?x=%2F": "/users/42",
	} {
		u, err := url.Parse(in)
		require.NoError(t, err)
		require.Equal(t, want, RoutedPath(u), in)
	}
}

func TestTemplatePath(t *testing.T) {
	require.Equal(t, "/a/b", TemplatePath("", "//a/./b", "/x"), "no route: the first candidate, cleaned")
	require.Equal(t, "/users/42", TemplatePath("/users/:id", "/users/42", "/other"))
	require.Equal(t, "/users/42", TemplatePath("/users/:id", "//users/42", "/users/42"), "the first candidate the template matches")
	require.Equal(t, "/users/:id", TemplatePath("/users/:id", "/users/4%2F2/x"), "none matches: the template")
	require.Zero(t, testing.AllocsPerRun(100, func() { TemplatePath("/users/:id", "/users/42", "/users/42") }))
}

func TestFoldPath(t *testing.T) {
	for _, tc := range []struct {
		in          string
		trim, lower bool
		want        string
	}{
		{"/Login/", true, true, "/login"},
		{"/Login/", false, true, "/login/"},
		{"/Login//", true, false, "/Login"},
		{"/", true, true, "/"},
		{"/a/B", false, false, "/a/B"},
	} {
		require.Equal(t, tc.want, FoldPath(tc.in, tc.trim, tc.lower), "%+v", tc)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { FoldPath("/users/42/", true, true) }))
}
