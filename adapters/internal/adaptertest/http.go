package adaptertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// ServeHTTP sends r to h as an HTTP harness does: GET r.Path (default "/")
// from 192.0.2.1:1 with r.Header, its context cancelled if r.Gone. ran is
// where the harness's handlers write the name of their route: ServeHTTP
// clears it first and reports it in Response.Ran.
func ServeHTTP(t *testing.T, h http.Handler, r Request, ran *string) Response {
	if r.Path == "" {
		r.Path = "/"
	}
	ctx := t.Context()
	if r.Gone {
		c, cancel := context.WithCancel(ctx)
		cancel() // the client is gone before the middleware runs
		ctx = c
	}
	hr := httptest.NewRequestWithContext(ctx, http.MethodGet, r.Path, nil)
	hr.RemoteAddr = "192.0.2.1:1"
	for k, vs := range r.Header {
		hr.Header[k] = vs
	}
	w := httptest.NewRecorder()
	*ran = ""
	h.ServeHTTP(w, hr)
	return Response{Status: w.Code, Header: w.Result().Header, Body: w.Body.String(), Ran: *ran}
}

// CostOf is the cost a harness's cost callback gives a request whose
// X-Cost header is v (Setup.Cost): v as a number, 0 if it is none.
func CostOf(v string) int64 {
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}
