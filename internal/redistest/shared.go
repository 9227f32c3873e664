package redistest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// SharedCluster is one Redis Cluster for a whole test binary: a cluster
// takes a little over 2 s to start (see StartCluster), the time of many of
// the tests that use one. Make it in TestMain with NewSharedCluster and
// Close it after m.Run; it starts on first use (Cluster), so a test binary
// whose selected tests never ask for it starts none.
//
// Tests on it share its nodes and their clock: each uses keys of its own
// and leaves the nodes as it found them. A test that kills, stalls,
// flushes or reconfigures a node, or that reads what every test leaves
// there (all the keys, INFO commandstats), starts its own with
// StartCluster.
type SharedCluster struct {
	masters int
	args    []string

	once sync.Once
	dir  string
	c    *Cluster
	err  error
	stop []func()
}

// NewSharedCluster returns a SharedCluster of masters nodes started with
// args (see StartCluster), not started yet.
func NewSharedCluster(masters int, args ...string) *SharedCluster {
	return &SharedCluster{masters: masters, args: args}
}

// Cluster returns the shared cluster, starting it on first use. A cluster
// that cannot start skips the test, or fails it under SLUICE_REQUIRE_REDIS=1,
// as StartCluster does; so does every later call.
func (s *SharedCluster) Cluster(t testing.TB) *Cluster {
	t.Helper()
	if s.masters < 1 || s.masters > 64 {
		t.Fatalf("redistest: NewSharedCluster: masters must be in 1..64, got %d", s.masters)
	}
	bin, major := binary(t)
	extra, err := argsToConf(s.args)
	if err != nil {
		t.Fatalf("%v", err)
	}
	s.once.Do(func() { s.c, s.err = s.start(bin, major, extra) })
	if s.err != nil {
		clusterFailed(t, s.err)
	}
	return s.c
}

func (s *SharedCluster) start(bin string, major int, extra []string) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "redistest-shared-")
	if err != nil {
		return nil, err
	}
	s.dir = dir
	report := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "redistest: shared cluster: "+format+"\n", args...)
	}
	newDir := func() (string, error) { return os.MkdirTemp(dir, "node-") }
	return launchCluster(newDir, report, func(f func()) { s.stop = append(s.stop, f) }, bin, major, s.masters, extra)
}

// Close stops the cluster's nodes, if it was started, and removes their
// files. Call it once every test has ended.
func (s *SharedCluster) Close() {
	for i := len(s.stop) - 1; i >= 0; i-- {
		s.stop[i]()
	}
	s.stop = nil
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
