package guard_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// faultProxy is redistest's fault-injecting TCP proxy.
type faultProxy = redistest.Proxy

// newFaultProxy forwards every connection to target, see redistest.NewProxy.
func newFaultProxy(t testing.TB, target string) *faultProxy { return redistest.NewProxy(t, target) }
