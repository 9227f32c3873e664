package adaptertest

import (
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// Accessor is implemented by an HTTP harness whose adapter has a typed
// accessor from a keyfunc.Request to its framework's request (Context,
// HTTPRequest) and a KeyFunc over it.
type Accessor interface {
	// Package is the adapter's package name, as its errors give it
	// ("ginlimit").
	Package() string
	// FormKey is the adapter's KeyFunc over its accessor that keys a
	// request by its form value field, read through the framework.
	FormKey(field string) keyfunc.Func
	// Access is the adapter's accessor on r: whether it found the
	// framework's request (ok), and what it returned (nil, untyped, if
	// that is nil).
	Access(r keyfunc.Request) (ok bool, got any)
}

// accessor: in a handler, the adapter's view built there is one the
// accessor finds the framework's request behind, and a Check on it keys
// by the KeyFunc. A login limit keyed by the form's username is one line: the
// adapter's KeyFunc reaches the framework's request through its accessor
// in the middleware, and the handler still reads the form. On a view that
// is not the adapter's (none, a static one, another adapter's) the
// accessor finds nothing (ok false, nil) and the KeyFunc fails with a key
// error naming the adapter, never a panic: Check returns it, and another
// adapter's middleware lets the request through undecided, and logs it.
func accessor(t *testing.T, h Harness, a Accessor) {
	form := a.FormKey("username")
	l := accessorInMiddleware(t, h, a, form)
	accessorInHandler(t, h, a, form)
	accessorElsewhere(t, a, l, form)
}

// loginAs is a login request with the form's username user.
func loginAs(user string) Request {
	return Request{Path: "/login", Form: url.Values{"username": {user}}}
}

// accessorInMiddleware: a login limit keyed by form, the adapter's
// KeyFunc, counts by the username in the middleware, where the accessor
// finds the framework's request, and the handler still reads the form.
// It returns the limiter.
func accessorInMiddleware(t *testing.T, h Harness, a Accessor, form keyfunc.Func) *core.Limiter {
	var mu sync.Mutex
	var found []bool
	key := func(r keyfunc.Request) (string, error) {
		ok, got := a.Access(r)
		mu.Lock()
		found = append(found, ok && got != nil)
		mu.Unlock()
		return form(r)
	}
	l, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "login", Key: key, Limit: core.PerMinute(2)}})
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: l})
	login := loginAs("alice")
	for range 2 {
		res := s.Do(t, login)
		require.Equal(t, http.StatusOK, res.Status)
		require.Equal(t, "login", res.Ran)
		require.Equal(t, "alice", res.Header.Get(HeaderForm), "the handler still reads the form")
	}
	require.Equal(t, http.StatusTooManyRequests, s.Do(t, login).Status, "alice's third attempt")
	require.Equal(t, http.StatusOK, s.Do(t, loginAs("bob")).Status, "bob has a bucket of his own")
	mu.Lock()
	require.Equal(t, []bool{true, true, true, true}, found, "the accessor finds the framework's request in the middleware")
	mu.Unlock()
	return l
}

// accessorInHandler: in a handler, the adapter's view built there is one
// the accessor finds the request behind, and a Check on it keys by form.
func accessorInHandler(t *testing.T, h Harness, a Accessor, form keyfunc.Func) {
	inHandler, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "login", Key: form, Limit: core.PerMinute(1)}})
	require.NoError(t, err)
	var checked []error
	var allowed, seen []bool
	s := h.Start(t, Setup{InHandler: func(r keyfunc.Request, native any) {
		ok, got := a.Access(r)
		seen = append(seen, ok && got == native)
		d, err := inHandler.Check(r.Context(), r)
		checked = append(checked, err)
		allowed = append(allowed, d.Allowed)
	}})
	login := loginAs("alice")
	for range 2 {
		require.Equal(t, http.StatusOK, s.Do(t, login).Status)
	}
	require.Equal(t, []bool{true, true}, seen, "the accessor finds the handler's very request")
	require.Equal(t, []error{nil, nil}, checked)
	require.Equal(t, []bool{true, false}, allowed, "on its own view the key function keys")
}

// accessorElsewhere: on a view that is not the adapter's (none, a static
// one, another adapter's) the accessor finds nothing and form fails with
// a key error naming the adapter: l's Check returns it, and another
// adapter's middleware lets the request through undecided, and logs it.
func accessorElsewhere(t *testing.T, a Accessor, l *core.Limiter, form keyfunc.Func) {
	login := loginAs("alice")
	errOther := a.Package() + ": KeyFunc: not a request of the " + a.Package() + " middleware"
	views := []keyfunc.Request{nil, &keyfunc.Static{}}
	other := a.Package() != "httplimit" // net/http is another adapter
	if other {
		views = append(views, httplimit.Request(HTTPRequest(t, login)))
	}
	for i, r := range views {
		ok, got := a.Access(r)
		require.False(t, ok, "view %d", i)
		require.Nil(t, got, "view %d", i)
		if r == nil {
			continue
		}
		_, err := form(r)
		require.ErrorContains(t, err, errOther, "view %d", i)
		_, err = l.Check(t.Context(), r)
		require.ErrorContains(t, err, `policy "login": key: `+errOther, "view %d", i)
	}
	if !other {
		return
	}
	var logs SyncBuffer
	mw := httplimit.New(l, httplimit.WithLogger(slogTo(&logs)))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		require.Equal(t, http.StatusOK, ServeHTTP(t, mw, login).Status, "undecided: proceeds")
	}
	require.Contains(t, logs.String(), "not a request of the "+a.Package()+" middleware")
}
