package adminauth_test

import (
	"crypto/rand"
	"encoding/base64"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/adminauth"
)

// TestFailedAuthenticationsBounded: every unknown secret not in the cache
// costs a database lookup, so a client guessing secrets is bounded: 20
// failures at once, then 20 a minute; past that its unknown secrets are
// 429 with Retry-After and cost no lookup (the database closed: still
// 429, never 503), tokens in the cache still pass (and are looked up again
// when their entry expires: a proxy's clients share its address), and
// another client is not held back.
func TestFailedAuthenticationsBounded(t *testing.T) {
	const ttl = time.Second
	// The cache and the failure budgets on a clock of the test's: the
	// budget refills by a guess every 3 s, so on the real clock a slow run
	// would see guesses looked up again that the test expects refused.
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newFixture(t, "file:"+filepath.Join(t.TempDir(), "rules.db"), adminauth.Options{CacheTTL: ttl, Now: clock})
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	}
	get := func(c *http.Client, secret string) *http.Response {
		req, err := http.NewRequestWithContext(tctx(t), http.MethodGet, f.url+"/things", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := c.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp
	}
	guess := func() string {
		var b [32]byte
		_, _ = rand.Read(b[:])
		return "slk_" + base64.RawURLEncoding.EncodeToString(b[:])
	}
	me, other := from("127.0.0.1"), from("127.0.0.2")
	require.Equal(t, http.StatusOK, get(me, f.read).StatusCode) // now in the cache
	for i := range 20 {
		require.Equal(t, http.StatusUnauthorized, get(me, guess()).StatusCode, "guess %d", i)
	}
	resp := get(me, guess())
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, retry >= 1 && retry <= 4, "Retry-After %d", retry)
	require.Equal(t, http.StatusUnauthorized, get(other, guess()).StatusCode, "another client is not held back")
	mu.Lock()
	now = now.Add(ttl) // the cached token's entry expires
	mu.Unlock()
	require.Equal(t, http.StatusOK, get(me, f.read).StatusCode, "a token in use is looked up again past the budget")

	require.NoError(t, f.db.Close()) // a lookup now fails: 503
	for i := range 20 {
		require.Equal(t, http.StatusTooManyRequests, get(me, guess()).StatusCode, "guess %d after the budget", i)
	}
	require.Equal(t, http.StatusOK, get(me, f.read).StatusCode, "a cached token still passes")
	require.Equal(t, http.StatusServiceUnavailable, get(other, guess()).StatusCode, "another client's guess is looked up")
}
