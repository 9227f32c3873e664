package ginlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/keyfunc"
)

type ctxKey struct{}

// The Request view reads the gin request as it is.
func TestRequestView(t *testing.T) {
	var got keyfunc.Request
	r := gin.New()
	r.GET("/users/:id", func(c *gin.Context) {
		got = ginlimit.Request(c)
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
		c.Status(http.StatusNoContent)
	})
	hr := httptest.NewRequest(http.MethodGet, "/users/42?a=b&a=c", nil)
	hr = hr.WithContext(context.WithValue(hr.Context(), ctxKey{}, "v"))
	hr.RemoteAddr = "203.0.113.7:4000"
	hr.Header.Set("X-Api-Key", "k1")
	hr.Header.Add("X-Forwarded-For", "10.0.0.1")
	hr.Header.Add("X-Forwarded-For", "10.0.0.2, 10.0.0.3")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, hr)
	require.Equal(t, http.StatusNoContent, w.Code)
	require.NotNil(t, got)

	// Outside a route, Route is the path.
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
