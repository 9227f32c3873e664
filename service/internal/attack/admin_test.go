package attack

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/adminauth"
)

// TestAttackAdminLimitNotARule: the admin API's per-token limits count in
// the service's store under the policies admin_read and admin_write, the
// identity "token:NAME". A rule given one of those ids would count on the
// same keys: an override of it would raise a token's own admin limit (or
// block another token's admin calls for 30 days), and unauthenticated
// checks of it would spend a token's admin budget. Such ids are refused.
func TestAttackAdminLimitNotARule(t *testing.T) {
	s := startAdminStack(t, "", memStore(t), adminauth.Options{WritesPerMinute: 5, ReadsPerMinute: 50}, "mallory", "victim")
	for _, id := range []string{adminauth.PolicyRead, adminauth.PolicyWrite} {
		st, _, body := s.do("mallory", http.MethodPost, "/api/v1/rules", map[string]any{
			"id": id, "name": "x", "dimension": "user", "limit": 1, "window_seconds": 60, "algorithm": "fixed_window", "enabled": true,
		})
		require.Equal(t, http.StatusBadRequest, st, "rule id %q: %s", id, body)
		require.Contains(t, string(body), `"field":"id"`)
	}
	s.waitRevision()
	// Nothing reached the store: mallory and victim keep their budgets
	// (mallory spent 2 of 5 writes above).
	for i := range 3 {
		st, _, body := s.do("mallory", http.MethodPut, "/api/v1/users/u1/tier", map[string]any{"tier": "t" + string(rune('a'+i))})
		require.Equal(t, http.StatusOK, st, "%s", body)
	}
	st, h, _ := s.do("mallory", http.MethodPut, "/api/v1/users/u1/tier", map[string]any{"tier": "z"})
	require.Equal(t, http.StatusTooManyRequests, st)
	require.NotEmpty(t, h.Get("Retry-After"))
	st, _, body := s.do("victim", http.MethodGet, "/api/v1/rules", nil)
	require.Equal(t, http.StatusOK, st, "%s", body)
}
