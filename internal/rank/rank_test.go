package rank

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Each step of the rule, in both orders, and ties keep the first.
func TestBinds(t *testing.T) {
	allowed := Result{Allowed: true, Remaining: 5, ResetAfter: time.Second}
	denied := Result{RetryAfter: time.Second}
	for _, c := range []struct {
		name string
		a, b Result
	}{
		{"a policy over a shadow", Result{Allowed: true, Remaining: 9}, Result{Shadow: true, RetryAfter: time.Hour}},
		{"a denial over an admission", denied, allowed},
		{"the longer wait among denials", Result{RetryAfter: time.Minute}, denied},
		{"the fewer remaining among admissions", Result{Allowed: true, Remaining: 1}, allowed},
		{"then the longer reset", Result{Allowed: true, Remaining: 5, ResetAfter: time.Minute}, allowed},
		{"shadows among themselves by the same rule", Result{Shadow: true, RetryAfter: time.Minute}, Result{Shadow: true, Allowed: true}},
	} {
		require.True(t, Binds(c.a, c.b), c.name)
		require.False(t, Binds(c.b, c.a), c.name)
	}
	for _, r := range []Result{allowed, denied, {Shadow: true}} {
		require.False(t, Binds(r, r), "a tie keeps the first: %+v", r)
	}
	require.False(t, Binds(Result{RetryAfter: time.Second, Remaining: 3}, denied), "a denial's Remaining does not count")
}
