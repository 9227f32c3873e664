package nginxuri_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/nginxuri"
)

// refused marks a target nginx answers 400.
const refused = "\x00refused"

// TestPath: $request_uri to $uri as nginx 1.22 computes them (each row was
// checked against a real nginx; service/internal/attack compares the two
// for thousands more).
func TestPath(t *testing.T) {
	for _, tc := range []struct {
		raw, merged, unmerged string // unmerged "" means the same as merged
	}{
		{"/", "/", ""},
		{"/login", "/login", ""},
		{"/login#x", "/login", ""},
		{"/login#", "/login", ""},
		{"/a#%zz", "/a", ""},
		{"/a?%zz", "/a", ""},
		{"/a#b?c", "/a", ""},
		{"/a?b#c", "/a", ""},
		{"/lo%67in", "/login", ""},
		{"/%6c%6F%67%69%6E", "/login", ""},
		{"//login", "/login", "//login"},
		{"///login", "/login", "///login"},
		{"/a//", "/a/", "/a//"},
		{"//", "/", "//"},
		{"/a/../login", "/login", ""},
		{"/login/.", "/login/", ""},
		{"/.", "/", ""},
		{"/./", "/", ""},
		{"/%2E", "/", ""},
		{"/a/..", "/", ""},
		{"/a/..#x", "/", ""},
		{"/a/.?x", "/a/", ""},
		{"/a/%2e%2e/login", "/login", ""},
		{"/a/.%2e/b", "/b", ""},
		{"/a%2flogin", "/a/login", ""},
		{"/a%2f..%2flogin", "/login", ""},
		{"/a%2F%2E%2E", "/", ""},
		{"/x/%2e%2e%2flogin", "/login", ""},
		{"/a%2f%2f..", "/", "/a/"},
		{"/a//../b", "/b", "/a/b"},
		{"/a//b/../c", "/a/c", "/a//c"},
		{"//..", refused, "/"},
		{"//x/..", "/", "//"},
		{"//.", "/", "//"},
		{"/%25", "/%", ""},
		{"/%252e%252e/", "/%2e%2e/", ""},
		{"/%23x", "/#x", ""},
		{"/%3fx", "/?x", ""},
		{"/%3Fx", "/?x", ""},
		{"/..%3F", "/..?", ""},
		{"/a%3F/..", "/", ""},
		{"/a%0ab", "/a\nb", ""},
		{"/a%20b", "/a b", ""},
		{"/%c3%a9", "/\xc3\xa9", ""},
		{"/\xff", "/\xff", ""},
		{"/a+b", "/a+b", ""},
		{"/a\\b", "/a\\b", ""},
		{"/a%5c..%5cb", "/a\\..\\b", ""},
		{"/a;b/../c", "/c", ""},
		{"/..;/x", "/..;/x", ""},
		{"/..a", "/..a", ""},
		{"/a..", "/a..", ""},
		{"/LOGIN", "/LOGIN", ""},
		{"/p?x", "/p", ""},
		{"?x", "/", ""},
		{"?", "/", ""},
		{"/..", refused, ""},
		{"/../login", refused, ""},
		{"/%2e%2e/login", refused, ""},
		{"/.%2e", refused, ""},
		{"/a/b/../../..", refused, ""},
		{"//../..", refused, ""},
		{"/%00", refused, ""},
		{"/%0", refused, ""},
		{"/%", refused, ""},
		{"/%zz", refused, ""},
		{"/%g0", refused, ""},
		{"/a%2?x", refused, ""},
		{"/a%?x", refused, ""},
		{"", refused, ""},
		{"login", refused, ""},
		{"*", refused, ""},
		{"http://h/login", refused, ""}, // $request_uri never holds the scheme
		{"/a b", refused, ""},
		{"/a\tb", refused, ""},
		{"/a\x7f", refused, ""},
		{"/a\x00", refused, ""},
	} {
		for _, merge := range []bool{true, false} {
			want := tc.merged
			if !merge && tc.unmerged != "" {
				want = tc.unmerged
			}
			got, err := nginxuri.Path(tc.raw, merge)
			if want == refused {
				var e *nginxuri.Error
				assert.True(t, errors.As(err, &e), "Path(%q, %v) = %q, %v: want a refusal", tc.raw, merge, got, err)
				continue
			}
			if assert.NoError(t, err, "Path(%q, %v)", tc.raw, merge) {
				assert.Equal(t, want, got, "Path(%q, %v)", tc.raw, merge)
			}
		}
	}
}

// TestPathErrorsSayWhy: a refusal names what nginx refuses.
func TestPathErrorsSayWhy(t *testing.T) {
	for raw, want := range map[string]string{
		"/a%zz":    "byte 2: a % not followed by two hex digits",
		"/a%00":    "byte 2: %00",
		"/a/../..": "a .. segment above the root",
		"x":        `starts with "x"`,
		"/a b":     `byte 2 is ' '`,
		"":         "empty",
	} {
		_, err := nginxuri.Path(raw, true)
		require.Error(t, err, raw)
		assert.Contains(t, err.Error(), want, raw)
	}
}

// FuzzPath: Path never panics, and what it returns is a path nginx could
// have matched: it starts with "/", holds no NUL, no "." or ".." segment
// and (slashes merged) no empty segment but a final one; a query or a
// fragment after the path changes nothing; and the result, escaped again,
// normalizes to itself.
func FuzzPath(f *testing.F) {
	for _, s := range []string{"/", "/login#x", "/a/../b", "//a//b/", "/%2e%2e/x", "/a%2f..%2fb", "/%25%23%3f", "?x", "/a/.", "/\xff%c3"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, raw string, merge bool) {
		got, err := nginxuri.Path(raw, merge)
		if err != nil {
			var e *nginxuri.Error
			if !errors.As(err, &e) {
				t.Fatalf("Path(%q): %v is not an *Error", raw, err)
			}
			return
		}
		checkResolved(t, raw, got, merge)
		if !strings.ContainsAny(raw, "?#") {
			for _, tail := range []string{"?q=1", "#f", "?a#b", "#/../..", "?"} {
				if again, err := nginxuri.Path(raw+tail, merge); err != nil || again != got {
					t.Fatalf("Path(%q) = %q, but Path(%q) = %q, %v", raw, got, raw+tail, again, err)
				}
			}
		}
		if again, err := nginxuri.Path(escape(got), merge); err != nil || again != got {
			t.Fatalf("Path(%q) = %q, but Path(%q) = %q, %v", raw, got, escape(got), again, err)
		}
	})
}

// checkResolved fails t unless p is a normalized path.
func checkResolved(t *testing.T, raw, p string, merge bool) {
	t.Helper()
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "\x00") {
		t.Fatalf("Path(%q) = %q: not a path", raw, p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		switch {
		case s == "." || s == "..":
			t.Fatalf("Path(%q) = %q: a %q segment is left", raw, p, s)
		case s == "" && merge && i != len(segs)-1:
			t.Fatalf("Path(%q) = %q: slashes not merged", raw, p)
		}
	}
}

// escape writes p back as a request target: every byte but letters,
// digits and "/" as %XX.
func escape(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '/' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
