//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain fails the package if any redis process or harness / go-redis
// goroutine outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if pids := livePids(); len(pids) > 0 {
		fmt.Fprintf(os.Stderr, "redistest: processes still running after tests: %v\n", pids)
		code = 1
	}
	if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
		fmt.Fprintf(os.Stderr, "redistest: goroutines leaked:\n%s\n", leaked)
		code = 1
	}
	os.Exit(code)
}

// leakedGoroutines waits up to d for goroutines started by this package or
// by go-redis to finish and returns the stacks of those that did not.
func leakedGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "created by github.com/sluicehq/sluice/internal/redistest") ||
				strings.Contains(g, "created by github.com/redis/go-redis") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// processGone reports whether pid no longer exists (it has been reaped).
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	s := StartServer(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
	t.Logf("StartServer: %v (%s, pid %d)", time.Since(begin), s.Addr, s.Pid())
	require.True(t, strings.HasPrefix(s.Addr, "127.0.0.1:"), s.Addr)

	ctx := ctxT(t, 20*time.Second)
	c := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)

	cfg, err := c.ConfigGet(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, "", cfg["save"])
	assert.Equal(t, "no", cfg["appendonly"])
	assert.Equal(t, "127.0.0.1", cfg["bind"])
	assert.Equal(t, "1048576", cfg["maxmemory"])
	assert.Equal(t, "noeviction", cfg["maxmemory-policy"])

	pid := s.Pid()
	require.NotZero(t, pid)
	begin = time.Now()
	s.Kill()
	t.Logf("Kill: %v", time.Since(begin))
	assert.Zero(t, s.Pid())
	assert.True(t, processGone(pid), "pid %d still exists after Kill", pid)
	assert.Error(t, c.Ping(ctx).Err(), "PING after Kill")
	s.Kill() // idempotent

	addr := s.Addr
	begin = time.Now()
	s.Restart(t)
	t.Logf("Restart after Kill: %v (pid %d)", time.Since(begin), s.Pid())
	assert.Equal(t, addr, s.Addr)
	assert.NotEqual(t, pid, s.Pid())
	// The same client reconnects to the same address.
	require.NoError(t, c.Ping(ctx).Err())
	assert.ErrorIs(t, c.Get(ctx, "k").Err(), redis.Nil, "no persistence: dataset empty after restart")
	require.NoError(t, c.Set(ctx, "k2", "v2", 0).Err())

	pid = s.Pid()
	begin = time.Now()
	s.Stop()
	t.Logf("Stop (graceful): %v", time.Since(begin))
	assert.True(t, processGone(pid))
	assert.Contains(t, s.LogTail(50), "ready to exit", "graceful shutdown logged")

	begin = time.Now()
	s.Restart(t) // from stopped
	t.Logf("Restart after Stop: %v", time.Since(begin))
	begin = time.Now()
	s.Restart(t) // while running: stops first
	t.Logf("Restart while running: %v", time.Since(begin))
	require.NoError(t, c.Ping(ctx).Err())
}

func TestStartServerRejectsManagedDirectives(t *testing.T) {
	_, err := argsToConf([]string{"--port", "1"})
	assert.Error(t, err)
	_, err = argsToConf([]string{"maxmemory", "1mb"})
	assert.Error(t, err)
	lines, err := argsToConf([]string{"--save", "", "--client-output-buffer-limit", "normal", "0", "0", "0", "--x", `a"b\c`})
	require.NoError(t, err)
	assert.Equal(t, []string{`save ""`, `client-output-buffer-limit "normal" "0" "0" "0"`, `x "a\"b\\c"`}, lines)
}

// fakeTB records Skipf/Fatalf and ends the calling goroutine like the real
// ones do.
type fakeTB struct {
	testing.TB
	mu            sync.Mutex
	skip, fatal   string
	skipped, fail bool
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped, f.skip = true, fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fail, f.fatal = true, fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func runFake(t *testing.T, f func(testing.TB)) *fakeTB {
	fake := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(fake)
	}()
	<-done
	return fake
}

func TestBinaryMissing(t *testing.T) {
	t.Setenv(BinaryEnv, "/nonexistent/redis-server")

	t.Setenv(RequireEnv, "")
	fake := runFake(t, func(tb testing.TB) { Binary(tb) })
	assert.True(t, fake.skipped, "skips when not required")
	assert.False(t, fake.fail)
	assert.Contains(t, fake.skip, "redis")

	t.Setenv(RequireEnv, "1")
	fake = runFake(t, func(tb testing.TB) { StartServer(tb) })
	assert.True(t, fake.fail, "fails when required")
	assert.False(t, fake.skipped)
	assert.Contains(t, fake.fatal, "redis-server")
}

func TestSlot(t *testing.T) {
	// Reference values from CLUSTER KEYSLOT.
	assert.Equal(t, 12182, Slot("foo"))
	assert.Equal(t, 5061, Slot("bar"))
	assert.Equal(t, Slot("user"), Slot("{user}:1"))
	assert.Equal(t, Slot("{}x"), Slot("{}x"))
	assert.NotEqual(t, Slot("x"), Slot("{}x"), "empty tag hashes the whole key")
}

func TestCluster(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	c := StartCluster(t, 3)
	t.Logf("StartCluster(3): %v (%v)", time.Since(begin), c.Addrs())
	ctx := ctxT(t, 20*time.Second)

	for _, n := range c.Nodes {
		nc := n.Client(t)
		info, err := nc.ClusterInfo(ctx).Result()
		require.NoError(t, err)
		assert.Contains(t, info, "cluster_state:ok")
		assert.Contains(t, info, "cluster_known_nodes:3")
		assert.Contains(t, info, "cluster_size:3")
	}

	cc := c.Client(t)
	probe := c.Nodes[0].Client(t)
	used := map[*Server]string{}
	for i := 0; len(used) < len(c.Nodes); i++ {
		key := fmt.Sprintf("{tag%d}:k", i)
		if _, ok := used[c.NodeForKey(key)]; !ok {
			used[c.NodeForKey(key)] = key
		}
	}
	for node, key := range used {
		slot, err := probe.ClusterKeySlot(ctx, key).Result()
		require.NoError(t, err)
		assert.EqualValues(t, Slot(key), slot, "Slot(%q)", key)

		require.NoError(t, cc.Set(ctx, key, node.Addr, 0).Err())
		got, err := cc.Get(ctx, key).Result()
		require.NoError(t, err)
		assert.Equal(t, node.Addr, got)
		// The key really lives on that node.
		direct, err := node.Client(t).Get(ctx, key).Result()
		require.NoError(t, err, "key %s on %s", key, node.Addr)
		assert.Equal(t, node.Addr, direct)
	}

	// A multi-key command across slots is refused by the server itself.
	keys := make([]string, 0, len(used))
	for _, k := range used {
		keys = append(keys, k)
	}
	err := c.Nodes[0].Client(t).MSet(ctx, keys[0], "1", keys[1], "2").Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CROSSSLOT")

	// Kill and restart a node: it rejoins with its nodes.conf.
	n := c.Nodes[1]
	n.Kill()
	begin = time.Now()
	n.Restart(t)
	c.WaitOK(t)
	t.Logf("cluster node Kill+Restart+WaitOK: %v", time.Since(begin))
	for node, key := range used {
		err := cc.Set(ctx, key, "again", 0).Err()
		require.NoError(t, err, "SET %s (node %s) after node restart", key, node.Addr)
	}
}

// A SharedCluster starts once, on first use, serves every test that asks
// for it, and Close stops its nodes.
func TestSharedCluster(t *testing.T) {
	t.Parallel()
	s := NewSharedCluster(3)
	s.Close() // never started: nothing to stop
	c := s.Cluster(t)
	require.Same(t, c, s.Cluster(t), "one cluster, started once")
	var pids []int
	ctx := ctxT(t, 20*time.Second)
	for _, n := range c.Nodes {
		pids = append(pids, n.Pid())
		info, err := n.Client(t).ClusterInfo(ctx).Result()
		require.NoError(t, err)
		assert.Contains(t, info, "cluster_state:ok")
	}
	cc := c.Client(t)
	require.NoError(t, cc.Set(ctx, "{shared}:k", "v", 0).Err())
	s.Close()
	for _, pid := range pids {
		assert.True(t, processGone(pid), "node %d still running after Close", pid)
	}
	_, err := os.Stat(s.dir)
	assert.True(t, os.IsNotExist(err), "its files are removed: %v", err)
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	s := StartSentinel(t)
	t.Logf("StartSentinel: %v (master %s replica %s sentinels %v)", time.Since(begin), s.Master.Addr, s.Replica.Addr, s.Addrs())
	ctx := ctxT(t, 30*time.Second)

	fc := s.Client(t)
	require.NoError(t, fc.Set(ctx, "before", "1", 0).Err())

	old, err := s.CurrentMaster(ctx)
	require.NoError(t, err)
	require.Equal(t, s.Master.Addr, old)
	oldMaster, oldReplica := s.Master, s.Replica

	begin = time.Now()
	s.Failover(t)
	t.Logf("Failover: %v", time.Since(begin))

	cur, err := s.CurrentMaster(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, old, cur)
	assert.Equal(t, oldReplica.Addr, cur)
	assert.Same(t, oldReplica, s.Master)
	assert.Same(t, oldMaster, s.Replica)
	role, err := oldMaster.Client(t).Do(ctx, "ROLE").Slice()
	require.NoError(t, err)
	assert.Equal(t, "slave", role[0], "old master demoted")

	// Same failover client: writes go to the new master, data survived.
	begin = time.Now()
	require.NoError(t, fc.Set(ctx, "after", "2", 0).Err())
	t.Logf("first write after Failover: %v", time.Since(begin))
	got, err := fc.Get(ctx, "before").Result()
	require.NoError(t, err)
	assert.Equal(t, "1", got)
	got, err = s.Master.Client(t).Get(ctx, "after").Result()
	require.NoError(t, err)
	assert.Equal(t, "2", got)

	// Automatic failover: kill the master, sentinels promote the replica.
	killed := s.Master.Addr
	begin = time.Now()
	s.Master.Kill()
	cur = s.WaitForNewMaster(t, killed)
	t.Logf("automatic failover after Kill: %v", time.Since(begin))
	assert.Equal(t, old, cur)
	begin = time.Now()
	require.NoError(t, fc.Set(ctx, "after-kill", "3", 0).Err())
	t.Logf("first write after automatic failover: %v", time.Since(begin))

	// The killed master comes back as a replica of the new one.
	begin = time.Now()
	s.Replica.Restart(t)
	require.NoError(t, poll(ctx, func() error { return replicaInSync(ctx, s.Master, s.Replica) }))
	t.Logf("old master Restart+resync as replica: %v", time.Since(begin))
	got, err = s.Replica.Client(t).Get(ctx, "after-kill").Result()
	require.NoError(t, err)
	assert.Equal(t, "3", got)
}

func TestPortConflict(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	port, addr := s.Port, s.Addr
	s.Kill()

	// Someone else grabs the port while the server is down.
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	defer l.Close()

	// Restart must keep the port, so it fails, with the log, within bounds.
	begin := time.Now()
	fake := runFake(t, func(tb testing.TB) { s.Restart(tb) })
	require.True(t, fake.fail)
	assert.Contains(t, fake.fatal, "Address already in use")
	assert.Less(t, time.Since(begin), startTimeout+time.Second)
	t.Logf("Restart on a taken port failed after %v", time.Since(begin))
	assert.Zero(t, s.Pid())

	// During initial startup (simulated here) a lost port race moves the
	// server to a fresh port.
	require.NoError(t, s.launch())
	require.NoError(t, s.awaitStart(time.Now().Add(startTimeout), true))
	assert.NotEqual(t, port, s.Port)
	require.NoError(t, s.Client(t).Ping(context.Background()).Err())
}

// TestLaunchClose: a server started without a test (Launch) answers until
// Close, which leaves no process behind.
func TestLaunchClose(t *testing.T) {
	t.Parallel()
	Binary(t) // skips (or fails under SLUICE_REQUIRE_REDIS=1) without redis-server
	s, err := Launch(t.TempDir()+"/redis", "--maxmemory", "1mb")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(s.Addr, "127.0.0.1:"), s.Addr)
	ctx := ctxT(t, 10*time.Second)
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, "1048576", c.ConfigGet(ctx, "maxmemory").Val()["maxmemory"])
	require.NoError(t, c.Close())
	pid := s.Pid()
	s.Close()
	require.True(t, processGone(pid), "the server must be gone after Close")
	_, err = Launch(t.TempDir(), "--port", "1")
	require.ErrorContains(t, err, "port", "a managed directive is refused")
}
