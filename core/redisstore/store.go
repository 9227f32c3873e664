package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/internal/cacheslot"
	"github.com/sluicehq/sluice/internal/pipeline"
)

// Store is the Redis core.Store. Build one with New; it is safe for
// concurrent use and holds no goroutine while idle. Close does not close the
// client, which the caller owns.
type Store struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
	th      core.Thresholds
	clock   func() time.Time
	r       *runner
	specs   [64]atomic.Pointer[compiled]
	batch   *pipeline.Batcher[*call]
	// cluster is client as a Cluster client, or nil. A Cluster store
	// pipelines the calls of each node apart (batchers, by address), so a
	// dead node's calls never share a pipeline or a deadline with a live
	// node's, and follows failovers (see fault).
	cluster  *redis.ClusterClient
	batchers atomic.Pointer[map[string]*pipeline.Batcher[*call]]
	bmu      sync.Mutex
	inflight int
	maxBatch int
	// stateOK: the Cluster client has loaded its slot map once.
	stateOK atomic.Bool
	// lastFault and lastReload are when a call last met a fault that may
	// mean the slot map changed, and when the store last asked the client
	// to reload it (ns since the epoch; 0: never, or long enough ago).
	lastFault, lastReload atomic.Int64
	calls                 sync.Pool // of *call, for Take (see newCall1)
	eachBufs              sync.Pool // of *eachBuf, for TakeEach
	closed                atomic.Bool
	log                   *slog.Logger
	// failedComp counts refunds of denied groups that failed; lastCompLog
	// is when one was last logged (ns since the epoch).
	failedComp  atomic.Uint64
	lastCompLog atomic.Int64
	reloads     atomic.Uint64
	// deadlines: the client honours context deadlines on its sockets.
	deadlines bool
}

// compiled is a Spec with its script argument prepared: the algorithm's
// code and six parameters, separated by spaces (see limit in
// lua/decide.lua), as a string and boxed once for go-redis.
type compiled struct {
	sp    algo.Spec
	limit string
	boxed any
}

// New returns a Store on client. It does not contact Redis: the library (or
// the scripts) are loaded on first use.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	c := config{prefix: "sluice", timeout: 50 * time.Millisecond, inflight: 1, maxBatch: 256, functions: true}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case client == nil:
		return nil, errors.New("redisstore: nil client")
	case c.prefix == "" || strings.ContainsAny(c.prefix, "{}"):
		return nil, fmt.Errorf("redisstore: WithPrefix: must be non-empty and free of braces, got %q", c.prefix)
	case c.timeout <= 0:
		return nil, fmt.Errorf("redisstore: WithTimeout: must be positive, got %s", c.timeout)
	case c.inflight < 0 || c.maxBatch < 0 || (c.inflight > 0) != (c.maxBatch > 0):
		return nil, fmt.Errorf("redisstore: WithPipelining: want both positive or both zero, got %d, %d", c.inflight, c.maxBatch)
	}
	if err := c.th.Validate(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	s := &Store{client: client, prefix: c.prefix, timeout: c.timeout, th: c.th, clock: c.clock, deadlines: honoursDeadlines(client), log: c.log}
	s.r = newRunner(client, c.functions)
	s.cluster, _ = client.(*redis.ClusterClient)
	s.inflight, s.maxBatch = c.inflight, c.maxBatch
	if c.inflight > 0 {
		s.batch = s.newBatcher()
	}
	return s, nil
}

// Close makes later calls fail with core.ErrClosed. Calls in flight finish.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// run runs c, bounded by its deadline and ctx. On a Cluster, c goes
// through the batcher of its node, and a failure names that node (see
// NodeError).
func (s *Store) run(ctx context.Context, c *call) error {
	var err error
	node := ""
	switch {
	case s.cluster != nil:
		node = s.nodeOfKey(c.firstKey(), c.Deadline()) // the first key: every key of a call shares its slot
		if s.batch != nil {
			err = s.runOn(ctx, s.batcherFor(node), c)
		} else {
			err = s.direct(ctx, c)
		}
	case s.batch != nil:
		err = s.runOn(ctx, s.batch, c)
	default:
		err = s.direct(ctx, c)
	}
	return s.failed(err, node)
}

// failed returns the error of a call on node ("": not a Cluster), or nil,
// and notes a fault (see fault).
func (s *Store) failed(err error, node string) error {
	if err == nil {
		return nil
	}
	s.fault(err)
	if node != "" {
		return &NodeError{Node: node, Err: err}
	}
	return fmt.Errorf("redisstore: %w", err)
}

// NodeError is the failure of a call on one node of a Cluster. It unwraps
// to the cause, and names the node (its address) so that a caller such as
// core/guard can keep failure state per node.
type NodeError struct {
	Node string
	Err  error
}

// Error returns "redisstore: node <address>: " and the cause.
func (e *NodeError) Error() string { return "redisstore: node " + e.Node + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *NodeError) Unwrap() error { return e.Err }

// FailedNode returns the address of the node that failed.
func (e *NodeError) FailedNode() string { return e.Node }

// Timeout returns the bound of every call (WithTimeout). It lets core/guard
// call the store without a timer of its own when its timeout is no
// shorter.
func (s *Store) Timeout() time.Duration { return s.timeout }

// Node returns the address of the Cluster master that serves k's identity
// (the hash tag of k's keys), as the client's slot map has it now, or "" when the client is
// not a Cluster client or has not loaded its slot map yet (a call does). It
// lets core/guard keep one circuit breaker per node. While faults are
// recent it also asks the client to reload its slot map now and then (see
// fault), so that a failover is followed even when no call reaches the
// failed node.
func (s *Store) Node(k core.Key) string {
	if s.cluster == nil || !s.stateOK.Load() {
		return "" // not before a call has loaded the slot map: Node never waits
	}
	s.reloadIfFaulted()
	id, _ := parts(k)
	t := tag(id)
	if t == "" {
		return ""
	}
	return s.nodeOfKey(t, time.Time{}) // a tag has no braces: its slot is the slot of "{tag}"
}

// nodeOfKey returns the address of the master that serves the Redis key k
// on a Cluster, or "" if the client cannot tell. Until the client has
// loaded its slot map, it loads it, by deadline.
func (s *Store) nodeOfKey(k string, deadline time.Time) string {
	ctx := context.Background()
	if !s.stateOK.Load() {
		if deadline.IsZero() {
			deadline = time.Now().Add(s.timeout)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	c, err := s.cluster.MasterForKey(ctx, k)
	if err != nil {
		return ""
	}
	s.stateOK.Store(true)
	return c.Options().Addr
}

// batcherFor returns the batcher of a Cluster node ("": calls whose node is
// unknown).
func (s *Store) batcherFor(node string) *pipeline.Batcher[*call] {
	if m := s.batchers.Load(); m != nil {
		if b := (*m)[node]; b != nil {
			return b
		}
	}
	s.bmu.Lock()
	defer s.bmu.Unlock()
	old := map[string]*pipeline.Batcher[*call]{}
	if m := s.batchers.Load(); m != nil {
		if b := (*m)[node]; b != nil {
			return b
		}
		old = *m
	}
	next := make(map[string]*pipeline.Batcher[*call], len(old)+1)
	if len(old) < maxNodes { // nodes come and go with failovers: bound them
		for k, b := range old {
			next[k] = b
		}
	}
	b := s.newBatcher()
	next[node] = b
	s.batchers.Store(&next)
	return b
}

// maxNodes bounds the batchers of a Cluster store.
const maxNodes = 1024

// Fault handling on a Cluster: how long after the last fault the store
// keeps asking for the slot map, and how often.
const (
	faultWindow    = 30 * time.Second
	reloadInterval = 100 * time.Millisecond
)

// fault notes a failed call. On a Cluster, a failure that may mean the slot
// map changed (a connection error, a timeout, CLUSTERDOWN, MOVED, ASK,
// TRYAGAIN, LOADING, READONLY, MASTERDOWN) asks the client to reload it at
// once (go-redis otherwise reloads it on its own schedule, every minute by
// default), and then every reloadInterval while faults keep coming and for
// faultWindow after the last: a replica promoted after a master died is
// followed within about reloadInterval of the cluster agreeing on it.
func (s *Store) fault(err error) {
	if s.cluster == nil || errors.Is(err, context.Canceled) {
		return // a caller that left says nothing about the cluster
	}
	var re redis.Error
	if errors.As(err, &re) && !topologyErr(err) {
		return // an answer about the call itself (WRONGTYPE, say)
	}
	s.lastFault.Store(time.Now().UnixNano())
	s.reloadIfFaulted()
}

// topologyErr reports a Redis error reply that may mean the slot map moved.
func topologyErr(err error) bool {
	for _, p := range [...]string{"CLUSTERDOWN", "MOVED", "ASK", "TRYAGAIN", "LOADING", "READONLY", "MASTERDOWN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// reloadIfFaulted asks the Cluster client to reload its slot map (in the
// background) if a fault is recent and the last request is reloadInterval
// old.
func (s *Store) reloadIfFaulted() {
	f := s.lastFault.Load()
	if f == 0 {
		return
	}
	now := time.Now().UnixNano()
	if now-f > int64(faultWindow) {
		s.lastFault.CompareAndSwap(f, 0)
		return
	}
	last := s.lastReload.Load()
	if now-last < int64(reloadInterval) || !s.lastReload.CompareAndSwap(last, now) {
		return
	}
	s.reloads.Add(1)
	s.cluster.ReloadState(context.Background())
}

// Stats counts what a Store did since New.
type Stats struct {
	// FailedCompensations is the number of admissions of denied groups
	// (Cluster, Ring, proxies: see Take) that could not be given back
	// because the refund failed or ran out of time. The group was denied
	// all the same; those units stay consumed until the key refills.
	FailedCompensations uint64
	// SlotReloads is the number of times the store asked a Cluster client
	// to reload its slot map after a fault (see Node).
	SlotReloads uint64
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	return Stats{FailedCompensations: s.failedComp.Load(), SlotReloads: s.reloads.Load()}
}

// runAll sends calls concurrently (the batcher pipelines them together) and
// returns the first error.
func (s *Store) runAll(ctx context.Context, calls []*call) error {
	if len(calls) == 1 {
		return s.run(ctx, calls[0])
	}
	for _, err := range s.runEach(ctx, calls) {
		if err != nil {
			return err
		}
	}
	return nil
}

// runEach sends calls concurrently and returns the error of each. With
// pipelining on, the calls of one node are queued together, so they go in
// one pipeline, not one after the other.
func (s *Store) runEach(ctx context.Context, calls []*call) []error {
	return s.runEachInto(ctx, calls, make([]error, len(calls)))
}

// runEachInto is runEach writing the errors to errs (len(calls)).
func (s *Store) runEachInto(ctx context.Context, calls []*call, errs []error) []error {
	if len(calls) == 1 {
		errs[0] = s.run(ctx, calls[0])
		return errs
	}
	if s.batch == nil {
		var wg sync.WaitGroup
		for j, c := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = s.run(ctx, c)
			}()
		}
		wg.Wait()
		return errs
	}
	if s.cluster == nil { // one server: every call in its one batcher
		s.batch.EnqueueContext(ctx, calls...)
		for j, c := range calls {
			err := c.Await(ctx)
			if err == nil {
				err = c.err
			}
			errs[j] = s.failed(err, "")
		}
		return errs
	}
	nodes := make([]string, len(calls))
	bs := make([]*pipeline.Batcher[*call], len(calls))
	for j, c := range calls {
		bs[j] = s.batch
		if s.cluster != nil {
			nodes[j] = s.nodeOfKey(c.firstKey(), c.Deadline())
			bs[j] = s.batcherFor(nodes[j])
		}
	}
	for j, b := range bs {
		if slices.Index(bs, b) != j {
			continue // queued with the first call of its node
		}
		var same []*call
		for k := j; k < len(bs); k++ {
			if bs[k] == b {
				same = append(same, calls[k])
			}
		}
		b.EnqueueContext(ctx, same...)
	}
	for j, c := range calls {
		err := c.Await(ctx)
		if err == nil {
			err = c.err
		}
		errs[j] = s.failed(err, nodes[j])
	}
	return errs
}

// compile returns l compiled, from a small lock-free cache.
func (s *Store) compile(l core.Limit) (*compiled, error) {
	slot := &s.specs[cacheslot.Of(l, len(s.specs))]
	if cp := slot.Load(); cp != nil && cp.sp.Limit == l {
		return cp, nil
	}
	sp, err := algo.Compile(l, s.th)
	if err != nil {
		return nil, err
	}
	cp := &compiled{sp: sp, limit: scriptLimit(&sp)}
	cp.boxed = cp.limit
	slot.Store(cp)
	return cp, nil
}

var _ core.Store = (*Store)(nil)
