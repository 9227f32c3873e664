package attack_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestMissingKeyDenies: a policy whose MissingKey is DenyRequest refuses a
// request without its identity in every adapter: no handler runs for it,
// and the other policies still count the requests that have one.
func TestMissingKeyDenies(t *testing.T) {
	each(t, func(t *testing.T, a adapter, st storeKind) {
		const floor = 5
		l := newLimiter(t, st.open(t), []core.Policy{
			{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerHour(100), MissingKey: core.DenyRequest},
			{Name: "ip-floor", Key: ip(t), Limit: core.PerHour(floor)},
		})
		srv := a.start(t, spec{limiter: l, routes: []string{"api"}})
		sts := sendAll(t, srv, 4, repeat(request{path: a.path("api")}, 30))
		require.Zero(t, countStatus(sts, http.StatusOK), "requests without X-API-Key that passed")
		require.Equal(t, 30, countStatus(sts, http.StatusTooManyRequests), "requests without X-API-Key are denied, not failed: %v", sts)
		sts = sendAll(t, srv, 4, repeat(request{path: a.path("api"), header: map[string]string{"X-API-Key": "k1"}}, 20))
		srv.stop()
		require.Equal(t, floor, countStatus(sts, http.StatusOK), "the IP floor still counts")
		require.Equal(t, int64(floor), srv.run("api"))
	})
}
