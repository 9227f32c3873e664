package echolimit_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/keyfunc"
)

type ctxKey struct{}

func TestRequestView(t *testing.T) {
	var got keyfunc.Request
	e := newEcho()
	e.GET("/users/:id", func(c echo.Context) error {
		got = echolimit.Request(c)
		require.Equal(t, "/users/:id", got.Route())
		require.Equal(t, "/users/42", got.Path())
		require.Equal(t, http.MethodGet, got.Method())
		require.Equal(t, "k1", got.Header("x-api-key"))
		require.Equal(t, "k1", got.Header("X-API-KEY"))
		require.Equal(t, []string{"10.0.0.1", "10.0.0.2, 10.0.0.3"}, got.HeaderValues("x-forwarded-for"))
		require.Nil(t, got.HeaderValues("X-Absent"))
		require.Equal(t, "b", got.Query("a"))
		require.Empty(t, got.Query("missing"))
		require.Equal(t, "203.0.113.7:4000", got.RemoteAddr())
		require.Equal(t, "v", got.Context().Value(ctxKey{}))
		return c.NoContent(http.StatusNoContent)
	})
	hr := httptest.NewRequest(http.MethodGet, "/users/42?a=b&a=c", nil)
	hr = hr.WithContext(context.WithValue(hr.Context(), ctxKey{}, "v"))
	hr.RemoteAddr = "203.0.113.7:4000"
	hr.Header.Set("X-Api-Key", "k1")
	hr.Header.Add("X-Forwarded-For", "10.0.0.1")
	hr.Header.Add("X-Forwarded-For", "10.0.0.2, 10.0.0.3")
	w := httptest.NewRecorder()
	e.ServeHTTP(w, hr)
	require.Equal(t, http.StatusNoContent, w.Code)
	require.NotNil(t, got)

	// Outside a route, Route is the path.
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/free/form", nil), httptest.NewRecorder())
	require.Equal(t, "/free/form", echolimit.Request(c).Route())
}

func TestFrameworkIP(t *testing.T) {
	key := echolimit.FrameworkIP()
	_, private, err := net.ParseCIDR("10.0.0.0/8")
	require.NoError(t, err)
	cases := []struct {
		name     string
		setup    func(*echo.Echo)
		remote   string
		header   http.Header
		want     string
		wantFail bool
	}{
		{
			name:   "no IPExtractor: the client picks its key (legacy leftmost X-Forwarded-For)",
			remote: "203.0.113.7:1", header: http.Header{"X-Forwarded-For": {"192.0.2.99, 10.0.0.1"}},
			want: "192.0.2.99",
		},
		{
			name:   "legacy path, a value that is not an address: the peer",
			remote: "203.0.113.7:1", header: http.Header{"X-Real-Ip": {"not-an-ip"}},
			want: "203.0.113.7",
		},
		{
			name:   "ExtractIPDirect: the peer",
			setup:  func(e *echo.Echo) { e.IPExtractor = echo.ExtractIPDirect() },
			remote: "203.0.113.7:1", header: http.Header{"X-Forwarded-For": {"192.0.2.99"}},
			want: "203.0.113.7",
		},
		{
			name: "ExtractIPFromXFFHeader with a trusted range: the address the proxy saw",
			setup: func(e *echo.Echo) {
				e.IPExtractor = echo.ExtractIPFromXFFHeader(echo.TrustPrivateNet(false), echo.TrustIPRange(private))
			},
			remote: "10.0.0.1:1", header: http.Header{"X-Forwarded-For": {"192.0.2.99, 198.51.100.4"}},
			want: "198.51.100.4",
		},
		{
			name:   "IPv6 is grouped by /64",
			setup:  func(e *echo.Echo) { e.IPExtractor = echo.ExtractIPDirect() },
			remote: "[2001:db8:1:2:3:4:5:6]:1",
			want:   "2001:db8:1:2::/64",
		},
		{
			name:   "IPv4-mapped is folded",
			setup:  func(e *echo.Echo) { e.IPExtractor = echo.ExtractIPDirect() },
			remote: "[::ffff:203.0.113.7]:1",
			want:   "203.0.113.7",
		},
		{
			name:   "no address at all",
			setup:  func(e *echo.Echo) { e.IPExtractor = echo.ExtractIPDirect() },
			remote: "@", wantFail: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEcho()
			if tc.setup != nil {
				tc.setup(e)
			}
			hr := httptest.NewRequest(http.MethodGet, "/", nil)
			hr.RemoteAddr = tc.remote
			for k, v := range tc.header {
				hr.Header[k] = v
			}
			got, err := key(echolimit.Request(e.NewContext(hr, httptest.NewRecorder())))
			if tc.wantFail {
				require.ErrorIs(t, err, keyfunc.ErrNoKey)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	_, err = key(keyfunc.Static{Remote: "203.0.113.7:1"})
	require.ErrorContains(t, err, "not a request of the echolimit middleware")
}
