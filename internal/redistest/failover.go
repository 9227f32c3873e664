package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartClusterWithReplicas starts a Redis Cluster of masters masters, each
// with replicas replicas (Cluster.Replicas[i] are those of Nodes[i]), and
// waits until the cluster is ok, every node agrees on the slot map and every
// replica is in sync with its master. Extra arguments apply to every node
// (say "--cluster-node-timeout", "1000" for a quicker failover). Killing a
// master (Server.Kill) then makes the cluster promote one of its replicas:
// see AwaitFailover.
func StartClusterWithReplicas(t testing.TB, masters, replicas int, args ...string) *Cluster {
	t.Helper()
	if replicas < 0 || replicas > 4 {
		t.Fatalf("redistest: StartClusterWithReplicas: replicas must be in 0..4, got %d", replicas)
	}
	c := StartCluster(t, masters, args...)
	if replicas == 0 {
		return c
	}
	bin, major := binary(t)
	extra, err := argsToConf(args)
	if err != nil {
		t.Fatalf("%v", err)
	}
	c.Replicas = make([][]*Server, masters)
	for i := range c.Nodes {
		for range replicas {
			s, err := newServer(t, bin, major, kindCluster, extra)
			if err != nil {
				startFailed(t, err)
			}
			c.Replicas[i] = append(c.Replicas[i], s)
		}
	}
	deadline := time.Now().Add(startTimeout)
	for _, rs := range c.Replicas {
		for _, s := range rs {
			if err := s.awaitStart(deadline, true); err != nil {
				startFailed(t, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterTimeout)
	defer cancel()
	if err := c.attachReplicas(ctx); err != nil {
		t.Fatalf("redistest: attaching replicas: %v%s", err, c.tails())
	}
	return c
}

// attachReplicas introduces the replicas to the cluster, makes each
// replicate its master and waits until all is in sync.
func (c *Cluster) attachReplicas(ctx context.Context) error {
	ids := make([]string, len(c.Nodes))
	for i, m := range c.Nodes {
		id, err := commandString(ctx, m.Addr, "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", m.Addr, err)
		}
		ids[i] = id
	}
	for _, rs := range c.Replicas {
		for _, s := range rs {
			if _, err := command(ctx, c.Nodes[0].Addr, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port)); err != nil {
				return fmt.Errorf("CLUSTER MEET %s: %w", s.Addr, err)
			}
		}
	}
	for i, rs := range c.Replicas {
		for _, s := range rs {
			// The replica must know its master before it can replicate it.
			err := poll(ctx, func() error {
				_, err := command(ctx, s.Addr, "CLUSTER", "REPLICATE", ids[i])
				return err
			})
			if err != nil {
				return fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", s.Addr, ids[i], err)
			}
		}
	}
	return poll(ctx, func() error {
		if err := c.checkAll(ctx); err != nil {
			return err
		}
		for i, rs := range c.Replicas {
			for _, s := range rs {
				if err := replicaInSync(ctx, c.Nodes[i], s); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// all returns every node started, masters and replicas.
func (c *Cluster) all() []*Server {
	out := append([]*Server(nil), c.Nodes...)
	for _, rs := range c.Replicas {
		out = append(out, rs...)
	}
	return out
}

// checkAll is check over masters and replicas: every node is ok, knows all
// others through connected links and agrees on the slot map.
func (c *Cluster) checkAll(ctx context.Context) error {
	all := c.all()
	want := make(map[string]bool, len(all))
	for _, s := range all {
		want[s.Addr] = true
	}
	var first string
	for _, s := range all {
		m, err := info(ctx, s.Addr, "cluster-info")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr, err)
		}
		if m["cluster_state"] != "ok" || m["cluster_known_nodes"] != strconv.Itoa(len(all)) {
			return fmt.Errorf("%s: cluster_state=%s known_nodes=%s", s.Addr, m["cluster_state"], m["cluster_known_nodes"])
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
			return fmt.Errorf("nodes disagree on the slot map:\n%s\n%s", first, view)
		}
	}
	return nil
}

// AwaitFailover waits (up to 30 s) after master Nodes[i] was killed until
// every live node agrees that one of its replicas now serves its slots, and
// returns that replica and the instant the agreement was first seen (nodes
// are polled every 10 ms). Nodes[i] is then replaced by the new master, so
// NodeForSlot and NodeForKey follow the failover.
func (c *Cluster) AwaitFailover(t testing.TB, i int) (*Server, time.Time) {
	t.Helper()
	if i < 0 || i >= len(c.Nodes) || len(c.Replicas) <= i || len(c.Replicas[i]) == 0 {
		t.Fatalf("redistest: AwaitFailover: master %d has no replica", i)
	}
	old := c.Nodes[i]
	slot := strconv.Itoa(c.ranges[i][0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterTimeout)
	defer cancel()
	var winner *Server
	for ctx.Err() == nil {
		winner = c.agreedOwner(ctx, old, slot)
		if winner != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	if winner == nil {
		t.Fatalf("redistest: no replica of %s was promoted within %v%s", old.Addr, 2*clusterTimeout, c.tails())
	}
	at := time.Now()
	c.Nodes[i] = winner
	rest := c.Replicas[i][:0]
	for _, s := range c.Replicas[i] {
		if s != winner {
			rest = append(rest, s)
		}
	}
	c.Replicas[i] = append(rest, old)
	return winner, at
}

// agreedOwner returns the replica that every live node other than old
// names as the master of slot, or nil.
func (c *Cluster) agreedOwner(ctx context.Context, old *Server, slot string) *Server {
	var owner string
	for _, s := range c.all() {
		if s == old {
			continue
		}
		nodes, err := commandString(ctx, s.Addr, "CLUSTER", "NODES")
		if err != nil {
			return nil
		}
		o := slotOwner(nodes, slot)
		if o == "" || o == old.Addr || (owner != "" && o != owner) {
			return nil
		}
		owner = o
	}
	for _, rs := range c.Replicas {
		for _, s := range rs {
			if s.Addr == owner {
				return s
			}
		}
	}
	return nil
}

// slotOwner returns the address of the master that CLUSTER NODES output
// says serves slot (given as the first slot of a range), or "".
func slotOwner(nodes, slot string) string {
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		for _, r := range f[8:] {
			lo, _, _ := strings.Cut(r, "-")
			if lo == slot {
				addr, _, _ := strings.Cut(f[1], "@")
				return addr
			}
		}
	}
	return ""
}
