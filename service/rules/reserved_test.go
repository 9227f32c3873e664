package rules

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReservedIDsRefused: a rule may not take the policy names of the
// admin API's per-token limits, from a file or from New.
func TestReservedIDsRefused(t *testing.T) {
	for _, id := range []string{PolicyAdminRead, PolicyAdminWrite} {
		require.True(t, Reserved(id))
		_, err := NewBytes("r.yaml", []byte("rules:\n  - name: "+id+"\n    dimension: user\n    limit: 10\n    window_seconds: 60\n")).Load(context.Background())
		require.ErrorContains(t, err, "name")
		require.ErrorContains(t, err, "reserved")
	}
	require.False(t, Reserved("admin_api"))
	_, err := NewBytes("r.yaml", []byte("rules:\n  - name: admin_api\n    dimension: user\n    limit: 10\n    window_seconds: 60\n")).Load(context.Background())
	require.NoError(t, err)
}
