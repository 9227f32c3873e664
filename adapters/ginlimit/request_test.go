package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// Outside a route, the view's Route is the path. (The view of a routed
// request: the conformance suite's RequestView.)
func TestRouteOutsideARoute(t *testing.T) {
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest(http.MethodGet, "/free/form", nil)
	require.Equal(t, "/free/form", ginlimit.Request(c).Route())
}

func TestRequestViewDoesNotAllocate(t *testing.T) {
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest(http.MethodGet, "/", nil)
	var sink keyfunc.Request
	allocs := testing.AllocsPerRun(100, func() { sink = ginlimit.Request(c) })
	require.Zero(t, allocs)
	require.NotNil(t, sink)
}

func TestFrameworkIP(t *testing.T) {
	key := ginlimit.FrameworkIP()
	cases := []struct {
		name     string
		setup    func(*gin.Engine)
		remote   string
		header   http.Header
		want     string
		wantFail bool
	}{
		{
			name:   "gin defaults trust every proxy: the client picks its key",
			remote: "203.0.113.7:1", header: http.Header{"X-Forwarded-For": {"192.0.2.99"}},
			want: "192.0.2.99",
		},
		{
			name:   "no trusted proxies: the peer",
			setup:  func(e *gin.Engine) { require.NoError(t, e.SetTrustedProxies(nil)) },
			remote: "203.0.113.7:1", header: http.Header{"X-Forwarded-For": {"192.0.2.99"}},
			want: "203.0.113.7",
		},
		{
			name:   "trusted proxy: the address it saw",
			setup:  func(e *gin.Engine) { require.NoError(t, e.SetTrustedProxies([]string{"10.0.0.0/8"})) },
			remote: "10.0.0.1:1", header: http.Header{"X-Forwarded-For": {"192.0.2.99, 198.51.100.4"}},
			want: "198.51.100.4",
		},
		{
			name:   "IPv6 is grouped by /64",
			setup:  func(e *gin.Engine) { require.NoError(t, e.SetTrustedProxies(nil)) },
			remote: "[2001:db8:1:2:3:4:5:6]:1",
			want:   "2001:db8:1:2::/64",
		},
		{
			name:   "IPv4-mapped is folded",
			setup:  func(e *gin.Engine) { require.NoError(t, e.SetTrustedProxies(nil)) },
			remote: "[::ffff:203.0.113.7]:1",
			want:   "203.0.113.7",
		},
		{
			name:   "an unvalidated platform header that is not an address: the peer",
			setup:  func(e *gin.Engine) { e.TrustedPlatform = gin.PlatformCloudflare },
			remote: "203.0.113.7:1", header: http.Header{"Cf-Connecting-Ip": {"not-an-ip"}},
			want: "203.0.113.7",
		},
		{
			name:   "no address at all",
			setup:  func(e *gin.Engine) { require.NoError(t, e.SetTrustedProxies(nil)) },
			remote: "@", wantFail: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := gin.New()
			if tc.setup != nil {
				tc.setup(e)
			}
			var got string
			var err error
			e.GET("/", func(c *gin.Context) { got, err = key(ginlimit.Request(c)) })
			hr := httptest.NewRequest(http.MethodGet, "/", nil)
			hr.RemoteAddr = tc.remote
			for k, v := range tc.header {
				hr.Header[k] = v
			}
			e.ServeHTTP(httptest.NewRecorder(), hr)
			if tc.wantFail {
				require.ErrorIs(t, err, keyfunc.ErrNoKey)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	_, err := key(keyfunc.Static{Remote: "203.0.113.7:1"})
	require.ErrorContains(t, err, "not a request of the ginlimit middleware")
}
