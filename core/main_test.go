package core_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// shared is the 3-master Cluster of this package's tests
// (redistest.SharedCluster): each uses keys of its own and leaves the
// nodes as it found them.
var shared = redistest.NewSharedCluster(3)

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close()
	os.Exit(code)
}
