package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/httpapi"
)

// getHeaders is get with header values that may repeat a name.
func getHeaders(t *testing.T, url string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return do(t, req)
}

// TestOriginalURINormalized: the endpoint of X-Original-URI ($request_uri,
// as the client wrote it) is the path nginx routed on, so every spelling of
// /api/v1/orders counts under orders-per-user (5 a minute), and the
// spellings nginx routes elsewhere do not.
func TestOriginalURINormalized(t *testing.T) {
	srv, _ := serve(t)
	url := srv.URL + httpapi.Path + "?key_type=user&key_value=dana"
	for i, u := range []string{
		"/api/v1/orders#x", "//api/v1/orders", "/api/v1/x/../orders?y", "/%61pi/v1/%6frders", "/api%2fv1%2forders",
	} {
		r := get(t, url, "X-Original-URI", u)
		require.Equal(t, http.StatusOK, r.status, "%q: %s", u, r.raw)
		require.Equal(t, "orders-per-user", r.body["rule"], "%q", u)
		require.Equal(t, float64(4-i), r.body["remaining"], "%q", u)
	}
	r := get(t, url, "X-Original-URI", "/api/v1/orders")
	require.Equal(t, false, r.body["allowed"], "the sixth is denied")
	for _, u := range []string{"/api/v1/orders%23x", "/api/v1/order", "/API/v1/orders", "?x"} {
		r := get(t, url, "X-Original-URI", u)
		require.Equal(t, http.StatusOK, r.status, "%q: %s", u, r.raw)
		require.Equal(t, "", r.body["rule"], "%q: nginx routes it elsewhere than /api/v1/orders", u)
	}

	// "/api/v1//../orders" is /api/orders with slashes merged (".." removes
	// v1), and /api/v1/orders with merge_slashes=off (nginx's merge_slashes
	// off: ".." removes the empty segment), where "//api/v1/orders" stays
	// as it is.
	r = get(t, srv.URL+httpapi.Path+"?key_type=user&key_value=erin", "X-Original-URI", "/api/v1//../orders")
	require.Equal(t, "", r.body["rule"], r.raw)
	url = srv.URL + httpapi.Path + "?key_type=user&key_value=erin&merge_slashes=off"
	r = get(t, url, "X-Original-URI", "/api/v1//../orders")
	require.Equal(t, "orders-per-user", r.body["rule"], r.raw)
	r = get(t, url, "X-Original-URI", "//api/v1/orders")
	require.Equal(t, "", r.body["rule"], r.raw)
	r = get(t, url+"&merge_slashes=on", "X-Original-URI", "//api/v1/orders")
	require.Equal(t, http.StatusBadRequest, r.status, "merge_slashes given twice")
}

// TestOriginalURIRefused: a target nginx would refuse, X-Original-URI or a
// Sluice-* header given twice, and a bad merge_slashes are 400 naming the
// field: never decided on an endpoint nginx could not have routed on.
func TestOriginalURIRefused(t *testing.T) {
	srv, _ := serve(t)
	url := srv.URL + httpapi.Path
	for _, tc := range []struct {
		name, query string
		header      []string
		field       string
	}{
		{"above the root", "?key_type=ip&key_value=1", []string{"X-Original-URI", "/%2e%2e/api/v1/orders"}, "X-Original-URI"},
		{"broken escape", "?key_type=ip&key_value=1", []string{"X-Original-URI", "/api/v1/orders%zz"}, "X-Original-URI"},
		{"NUL", "?key_type=ip&key_value=1", []string{"X-Original-URI", "/api/v1/orders%00"}, "X-Original-URI"},
		{"no slash", "?key_type=ip&key_value=1", []string{"X-Original-URI", "api/v1/orders"}, "X-Original-URI"},
		{"absolute", "?key_type=ip&key_value=1", []string{"X-Original-URI", "http://h/api/v1/orders"}, "X-Original-URI"},
		{"twice", "?key_type=ip&key_value=1", []string{"X-Original-URI", "/nothing", "X-Original-URI", "/api/v1/orders"}, "X-Original-URI"},
		{"merge_slashes", "?key_type=ip&key_value=1&merge_slashes=no", []string{"X-Original-URI", "/api/v1/orders"}, "merge_slashes"},
		{"merge_slashes alone", "?key_type=ip&key_value=1&merge_slashes=yes", nil, "merge_slashes"},
		{"merge_slashes twice", "?key_type=ip&key_value=1&merge_slashes=on&merge_slashes=off", []string{"X-Original-URI", "/a"}, "merge_slashes"},
		{"header key twice", "", []string{"Sluice-Key-Type", "ip", "Sluice-Key-Value", "1", "Sluice-Key-Value", "2"}, "Sluice-Key-Value"},
		{"header count twice", "", []string{"Sluice-Key-Type", "ip", "Sluice-Key-Value", "1", "Sluice-Request-Count", "1", "Sluice-Request-Count", "0"}, "Sluice-Request-Count"},
	} {
		r := getHeaders(t, url+tc.query, tc.header...)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", tc.name, r.raw)
		require.Equal(t, tc.field, r.body["field"], "%s: %s", tc.name, r.raw)
		require.True(t, strings.HasPrefix(r.body["detail"].(string), tc.field+": "), r.raw)
	}
	r := post(t, url, `{"key_type":"ip","key_value":"1","request_count":0}`)
	require.Equal(t, float64(3), r.body["remaining"], "nothing was counted")
}

// TestProxiedIgnoresSluiceHeaders: when the query names the key (nginx's
// auth_request setup), the subrequest's headers may be the client's: no
// Sluice-* header changes the check, not even Sluice-Idempotency-Key,
// which would let a client repeat one key for free requests. An
// idempotency key in the query (the proxy's choice) still works.
func TestProxiedIgnoresSluiceHeaders(t *testing.T) {
	srv, _ := serve(t)
	url := srv.URL + httpapi.Path + "?mode=status&key_type=ip&key_value=10.7.7.7"
	every := []string{
		"Sluice-Idempotency-Key", "same", "Sluice-Request-Count", "0", "Sluice-Rule-Id", "orders-per-user",
		"Sluice-Endpoint", "/nothing", "Sluice-Key-Type", "user", "Sluice-Key-Value", "someone",
	}
	var got []int
	for range 5 {
		got = append(got, get(t, url, every...).status)
	}
	require.Equal(t, []int{200, 200, 200, 429, 429}, got, "per-ip admits 3, whatever the client's headers")

	url = srv.URL + httpapi.Path + "?key_type=ip&key_value=10.7.7.8&idempotency_key=order-1"
	for range 3 {
		r := get(t, url)
		require.Equal(t, true, r.body["allowed"])
		require.Equal(t, float64(2), r.body["remaining"], "a repeat of the query's key is free")
	}
}
