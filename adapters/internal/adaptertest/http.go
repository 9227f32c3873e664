package adaptertest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// HTTPRequest is r as an HTTP harness sends it: GET r.Path (default "/"),
// or POST of r.Form if it is not nil,
// from r.Remote (default 192.0.2.1) port 1 (NoAddress: RemoteAddr "@")
// with r.Header, its context holding ContextValue and cancelled if r.Gone.
func HTTPRequest(t *testing.T, r Request) *http.Request {
	if r.Path == "" {
		r.Path = "/"
	}
	if r.Remote == "" {
		r.Remote = "192.0.2.1"
	}
	ctx := context.WithValue(t.Context(), ContextKey{}, ContextValue)
	if r.Gone {
		c, cancel := context.WithCancel(ctx)
		cancel() // the client is gone before the middleware runs
		ctx = c
	}
	hr := httptest.NewRequestWithContext(ctx, http.MethodGet, r.Path, nil)
	if r.Form != nil {
		hr = httptest.NewRequestWithContext(ctx, http.MethodPost, r.Path, strings.NewReader(r.Form.Encode()))
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	hr.RemoteAddr = net.JoinHostPort(r.Remote, "1")
	if r.Remote == NoAddress {
		hr.RemoteAddr = NoAddress
	}
	for k, vs := range r.Header {
		hr.Header[k] = vs
	}
	return hr
}

// ServeHTTP sends r to h as an HTTP harness does (HTTPRequest) and returns
// what the client saw.
func ServeHTTP(t *testing.T, h http.Handler, r Request) Response {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, HTTPRequest(t, r))
	res := w.Result()
	return Response{Status: res.StatusCode, Header: res.Header, Body: w.Body.String(), Ran: res.Header.Get(HeaderRoute)}
}

// CostOf is the cost a harness's cost callback gives a request whose
// X-Cost header is v (Setup.Cost): v as a number, 0 if it is none.
func CostOf(v string) int64 {
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}
