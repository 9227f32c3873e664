package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/keyfunc"
)

// The policy layer on Redis, through the net/http adapter: policies of two
// identities decided all or nothing, a shadow policy, an override, a refund
// after the response and an idempotent retry.
func TestLimiterOnRedisThroughNetHTTP(t *testing.T) {
	store := newStore(t, shared.Cluster(t).Client(t), redisstore.WithTimeout(5*time.Second))
	ip := keyfunc.IP()
	user := keyfunc.Header("X-User")
	run := fmt.Sprint(time.Now().UnixNano())
	l, err := core.NewLimiter(store, []core.Policy{
		{Name: "ip-" + run, Key: ip, Limit: core.PerMinute(5)},
		{Name: "user-" + run, Key: user, Limit: core.PerMinute(3).WithAlgorithm(core.SlidingWindowCounter), Refund: core.RefundFailed},
		{Name: "trial-" + run, Key: user, Limit: core.PerMinute(1), Shadow: true},
	}, core.WithIdempotency(core.Idempotency{}))
	require.NoError(t, err)
	status := http.StatusOK
	h := httplimit.New(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	send := func(u string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "198.51.100.9:1"
		r.Header.Set("X-User", u+run)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// Failed responses are refunded by the user policy only.
	status = http.StatusInternalServerError
	send("alice")
	send("alice")
	status = http.StatusOK
	codes := []int{}
	for range 4 {
		codes = append(codes, send("alice").Code)
	}
	require.Equal(t, []int{200, 200, 200, 429}, codes, "3 for alice, her failed requests refunded; the shadow trial never denied")
	// The IP policy counted all five admissions (it does not refund): another
	// user from the same address is denied by it, and only by it.
	w := send("bob")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Contains(t, w.Body.String(), `"violated-policies":["ip-`+run+`"]`)
	// An override raises the IP limit for this address at once.
	require.NoError(t, l.SetOverride(context.Background(), "ip-"+run, "198.51.100.9", core.PerMinute(50), time.Now().Add(time.Minute)))
	require.Equal(t, http.StatusOK, send("bob").Code)
	// An idempotent retry is free.
	first := send("carol", "X-Idempotency-Key", "k1").Result().Header.Get("X-RateLimit-Remaining")
	again := send("carol", "X-Idempotency-Key", "k1").Result().Header.Get("X-RateLimit-Remaining")
	require.Equal(t, first, again)
}
