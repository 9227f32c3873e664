package echolimit_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// Outside a route, the view's Route is the path. (The view of a routed
// request: the conformance suite's RequestView.)
func TestRouteOutsideARoute(t *testing.T) {
	c := newEcho().NewContext(httptest.NewRequest(http.MethodGet, "/free/form", nil), httptest.NewRecorder())
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
