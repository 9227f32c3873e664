package middleware

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// lines is a header block as fasthttp visits it, names as sent.
type lines [][2]string

func (ls lines) visitAll(f func(k, v []byte)) {
	for _, l := range ls {
		f([]byte(l[0]), []byte(l[1]))
	}
}

// A header is the framework's lookup when it found one; otherwise, only for
// a framework that does not normalize names, the lines scanned ignoring
// case.
func TestHeaderLookups(t *testing.T) {
	ls := lines{{"x-api-key", "k1"}, {"X-Forwarded-For", "10.0.0.1"}, {"x-forwarded-for", "10.0.0.2"}}
	require.Equal(t, "found", Header([]byte("found"), true, ls.visitAll, "X-Api-Key"))
	require.Equal(t, "k1", Header(nil, true, ls.visitAll, "X-Api-Key"))
	require.Empty(t, Header(nil, false, ls.visitAll, "X-Api-Key"), "names normalized: the lookup is the answer")
	require.Empty(t, Header(nil, true, ls.visitAll, "X-Absent"))
	require.Equal(t, []string{"a", "b"}, HeaderValues([][]byte{[]byte("a"), []byte("b")}, true, ls.visitAll, "X-Forwarded-For"))
	require.Equal(t, []string{"10.0.0.1", "10.0.0.2"}, HeaderValues(nil, true, ls.visitAll, "X-Forwarded-For"))
	require.Nil(t, HeaderValues(nil, false, ls.visitAll, "X-Forwarded-For"))
	require.Zero(t, testing.AllocsPerRun(100, func() { Header([]byte("v"), true, ls.visitAll, "X") }))
}

func TestAccessors(t *testing.T) {
	s := &keyfunc.Static{Remote: "192.0.2.1:1"}
	c, ok := As(keyfunc.Request(s), func(v *keyfunc.Static) string { return v.Remote })
	require.True(t, ok)
	require.Equal(t, "192.0.2.1:1", c)
	_, ok = As(keyfunc.Request(s), func(v *addrAs) string { return v.ip })
	require.False(t, ok)
	require.Equal(t, "/users/:id", Or("/users/:id", "/users/1"))
	require.Equal(t, "/users/1", Or("", "/users/1"))

	d := &core.Decision{}
	got, ok := DecisionOf(d)
	require.True(t, ok)
	require.Same(t, d, got)
	_, ok = DecisionOf(nil)
	require.False(t, ok)
	require.JSONEq(t, ProblemBody, string(ProblemFor(nil, false)))
}

// Label marks a 429 no-store, and problem+json only when the named writer
// wrote the marshaled problem.
func TestProblemLabel(t *testing.T) {
	p := &Problem{Body: []byte(ProblemBody)}
	h := http.Header{}
	p.Label(h, http.StatusOK, false, "TestProblemLabel")
	require.Empty(t, h, "not a 429")
	p.Label(h, http.StatusTooManyRequests, false, "TestProblemLabel")
	require.Equal(t, "no-store", h.Get("Cache-Control"))
	require.Empty(t, h.Get("Content-Type"), "not marshaled")
	_, _ = p.MarshalJSON()
	p.Label(h, http.StatusTooManyRequests, false, "nobody.Writes")
	require.Empty(t, h.Get("Content-Type"), "written by another function")
	p.Label(h, http.StatusTooManyRequests, false, ".TestProblemLabel")
	require.Equal(t, "application/problem+json", h.Get("Content-Type"))
	h = http.Header{"Cache-Control": {"private"}}
	p.Label(h, http.StatusTooManyRequests, true, ".TestProblemLabel")
	require.Equal(t, "private", h.Get("Cache-Control"), "the handler's own")
}
