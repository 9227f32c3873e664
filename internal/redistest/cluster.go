package redistest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// NumSlots is the number of Redis Cluster hash slots.
	NumSlots = 16384

	clusterTimeout = 15 * time.Second
)

// Cluster is a Redis Cluster of master-only nodes started by StartCluster.
type Cluster struct {
	// Nodes are the masters, in slot order: Nodes[i] was given the i-th
	// contiguous share of the 16384 slots.
	Nodes []*Server
	// Replicas[i] are the replicas of Nodes[i] (StartClusterWithReplicas).
	Replicas [][]*Server

	ranges [][2]int // initial slot range [first, last] of each node
}

// StartCluster starts masters cluster-enabled redis-server nodes (no
// replicas), splits the 16384 slots evenly between them in contiguous ranges
// (CLUSTER ADDSLOTSRANGE, or ADDSLOTS before Redis 7), joins them with
// CLUSTER MEET and waits until every node reports cluster_state:ok and all
// nodes agree on the slot map. Extra arguments (command-line syntax, see
// StartServer) apply to every node. Nodes use cluster-node-timeout 3000.
//
// Startup takes a little over 2 s: Redis keeps a freshly started master in
// cluster_state:fail for 2 s (CLUSTER_WRITABLE_DELAY) whatever we do.
func StartCluster(t testing.TB, masters int, args ...string) *Cluster {
	t.Helper()
	if masters < 1 || masters > 64 {
		t.Fatalf("redistest: StartCluster: masters must be in 1..64, got %d", masters)
	}
	bin, major := binary(t)
	extra, err := argsToConf(args)
	if err != nil {
		t.Fatalf("%v", err)
	}
	c, err := launchCluster(func() (string, error) { return t.TempDir(), nil }, t.Errorf, t.Cleanup, bin, major, masters, extra)
	if err != nil {
		clusterFailed(t, err)
	}
	return c
}

// formError is a cluster whose nodes started but did not form a cluster:
// always a failure, never a skip.
type formError struct{ error }

// clusterFailed reports an error of launchCluster.
func clusterFailed(t testing.TB, err error) {
	t.Helper()
	var fe formError
	if errors.As(err, &fe) {
		t.Fatalf("redistest: %v", err)
	}
	startFailed(t, err)
}

// launchCluster starts masters nodes, each in a directory of newDir,
// reporting stop failures with errorf and registering their cleanups with
// cleanup, and forms them into a cluster (see StartCluster).
func launchCluster(newDir func() (string, error), errorf func(string, ...any), cleanup func(func()), bin string, major, masters int, extra []string) (*Cluster, error) {
	c := &Cluster{}
	// Launch every node first so that they boot in parallel, then wait.
	for range masters {
		dir, err := newDir()
		if err != nil {
			return nil, err
		}
		s, err := newServerIn(dir, errorf, cleanup, bin, major, kindCluster, extra)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	deadline := time.Now().Add(startTimeout)
	for _, s := range c.Nodes {
		if err := s.awaitStart(deadline, true); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.form(ctx, major); err != nil {
		return nil, formError{fmt.Errorf("forming cluster: %w%s", err, c.tails())}
	}
	if err := c.waitOK(ctx); err != nil {
		return nil, formError{fmt.Errorf("cluster did not converge within %v: %w%s", clusterTimeout, err, c.tails())}
	}
	return c, nil
}

func (c *Cluster) form(ctx context.Context, major int) error {
	n := len(c.Nodes)
	c.ranges = make([][2]int, n)
	for i, s := range c.Nodes {
		lo, hi := i*NumSlots/n, (i+1)*NumSlots/n-1
		c.ranges[i] = [2]int{lo, hi}
		// Distinct epochs up front avoid the epoch-collision dance.
		if _, err := command(ctx, s.Addr, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", s.Addr, err)
		}
		if err := addSlots(ctx, s.Addr, lo, hi, major); err != nil {
			return err
		}
	}
	for _, s := range c.Nodes[1:] {
		if _, err := command(ctx, c.Nodes[0].Addr, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port)); err != nil {
			return fmt.Errorf("%s: CLUSTER MEET %s: %w", c.Nodes[0].Addr, s.Addr, err)
		}
	}
	return nil
}

func addSlots(ctx context.Context, addr string, lo, hi, major int) error {
	if major >= 7 {
		if _, err := command(ctx, addr, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", addr, lo, hi, err)
		}
		return nil
	}
	args := []string{"CLUSTER", "ADDSLOTS"}
	for slot := lo; slot <= hi; slot++ {
		args = append(args, strconv.Itoa(slot))
	}
	if _, err := command(ctx, addr, args...); err != nil {
		return fmt.Errorf("%s: CLUSTER ADDSLOTS %d..%d: %w", addr, lo, hi, err)
	}
	return nil
}

// WaitOK waits (up to 15 s) until every node answers, reports
// cluster_state:ok with all slots served, knows all the other nodes through
// connected links without failure flags, and all nodes agree on the slot
// map. Use it after restarting nodes. All nodes must be running.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.waitOK(ctx); err != nil {
		t.Fatalf("redistest: cluster not ok within %v: %v%s", clusterTimeout, err, c.tails())
	}
}

func (c *Cluster) waitOK(ctx context.Context) error {
	return poll(ctx, func() error { return c.check(ctx) })
}

// check returns nil when the cluster is healthy and consistent.
func (c *Cluster) check(ctx context.Context) error {
	n := len(c.Nodes)
	want := make(map[string]bool, n)
	for _, s := range c.Nodes {
		want[s.Addr] = true
	}
	var first string
	for _, s := range c.Nodes {
		m, err := info(ctx, s.Addr, "cluster-info")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr, err)
		}
		if m["cluster_state"] != "ok" || m["cluster_slots_ok"] != strconv.Itoa(NumSlots) ||
			m["cluster_known_nodes"] != strconv.Itoa(n) {
			return fmt.Errorf("%s: cluster_state=%s slots_ok=%s known_nodes=%s (want ok/%d/%d)",
				s.Addr, m["cluster_state"], m["cluster_slots_ok"], m["cluster_known_nodes"], NumSlots, n)
		}
		nodes, err := commandString(ctx, s.Addr, "CLUSTER", "NODES")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER NODES: %w", s.Addr, err)
		}
		view, err := canonicalNodes(nodes, want)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Addr, err)
		}
		if first == "" {
			first = view
		} else if view != first {
			return fmt.Errorf("nodes disagree on the slot map:\n%s: %s\n%s: %s", c.Nodes[0].Addr, first, s.Addr, view)
		}
	}
	return nil
}

// canonicalNodes turns CLUSTER NODES output into a canonical
// "addr slots; ..." string, checking that exactly the wanted nodes are known,
// all links are connected and no node is flagged failing or handshaking.
func canonicalNodes(nodes string, want map[string]bool) (string, error) {
	var entries []string
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return "", fmt.Errorf("malformed CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@") // ip:port@cport[,hostname]
		if !want[addr] {
			return "", fmt.Errorf("unexpected or unresolved node address %q", f[1])
		}
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "fail", "fail?", "handshake", "noaddr":
				return "", fmt.Errorf("node %s flagged %s", addr, f[2])
			}
		}
		if f[7] != "connected" {
			return "", fmt.Errorf("node %s link %s", addr, f[7])
		}
		var slots []string
		for _, sl := range f[8:] {
			if !strings.HasPrefix(sl, "[") { // skip importing/migrating markers
				slots = append(slots, sl)
			}
		}
		entries = append(entries, addr+" "+strings.Join(slots, " "))
		seen++
	}
	if seen != len(want) {
		return "", fmt.Errorf("knows %d nodes, want %d", seen, len(want))
	}
	sort.Strings(entries)
	return strings.Join(entries, "; "), nil
}

func (c *Cluster) tails() string {
	var b strings.Builder
	for _, s := range c.Nodes {
		b.WriteString(s.tail())
	}
	return b.String()
}

// Addrs returns the nodes' addresses, in the order of Nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Client returns a go-redis cluster client seeded with all node addresses,
// closed on test cleanup. Options may adjust the redis.ClusterOptions.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, f := range opts {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// NodeForSlot returns the node that StartCluster assigned slot to (the
// harness never moves slots; a test that reshards must track that itself).
func (c *Cluster) NodeForSlot(slot int) *Server {
	for i, r := range c.ranges {
		if slot >= r[0] && slot <= r[1] {
			return c.Nodes[i]
		}
	}
	return nil
}

// NodeForKey returns the node that serves key, see NodeForSlot.
func (c *Cluster) NodeForKey(key string) *Server { return c.NodeForSlot(Slot(key)) }

// Slot returns the Redis Cluster hash slot of key (CRC16/XMODEM of the key,
// or of its first non-empty {hash tag}, modulo 16384), as CLUSTER KEYSLOT.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % NumSlots
}
