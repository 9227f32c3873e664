package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/internal/cacheslot"
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
	batch   *batcher
	// cluster is client as a Cluster client, or nil. A Cluster store
	// pipelines the calls of each node apart (batchers, by address), so a
	// dead node's calls never share a pipeline or a deadline with a live
	// node's, and follows failovers (see fault).
	cluster  *redis.ClusterClient
	batchers atomic.Pointer[map[string]*batcher]
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
	c := config{prefix: "sluice", timeout: 50 * time.Millisecond, inflight: 2, maxBatch: 256, functions: true}
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
		s.batch = newBatcher(s, c.inflight, c.maxBatch)
	}
	return s, nil
}

// Close makes later calls fail with core.ErrClosed. Calls in flight finish.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// Take decides one request for key under l; see core.Store.
func (s *Store) Take(ctx context.Context, key string, l core.Limit, cost int64) (core.Result, error) {
	cp, err := s.prepare(key != "", l, cost)
	if err != nil {
		return core.Result{}, err
	}
	id, policy := split(key)
	return s.take(ctx, cp, id, policy, l.Algorithm, cost)
}

// TakeSplit is Take of identity+"\x00"+policy (see core.SplitKeyStore): the
// same keys, built without joining the two.
func (s *Store) TakeSplit(ctx context.Context, identity, policy string, l core.Limit, cost int64) (core.Result, error) {
	if strings.IndexByte(policy, 0) >= 0 { // split would cut the joined key elsewhere
		return s.Take(ctx, identity+"\x00"+policy, l, cost)
	}
	cp, err := s.prepare(true, l, cost) // the joined key is never empty
	if err != nil {
		return core.Result{}, err
	}
	return s.take(ctx, cp, identity, policy, l.Algorithm, cost)
}

// take decides one op on the keys of identity id and policy.
func (s *Store) take(ctx context.Context, cp *compiled, id, policy string, a core.Algorithm, cost int64) (core.Result, error) {
	c := s.newCall1(time.Now().Add(s.timeout))
	c.argv = s.opKeys(c.argv, id, policy, a)
	c.argv = append(c.argv, s.now(), cp.boxed, cost)
	err := s.run(ctx, c)
	var d decided
	if err == nil {
		err = s.decode(c.res, cp, &d)
	}
	s.putCall1(c)
	if err != nil {
		return core.Result{}, err
	}
	return d.result(), nil
}

// newCall1 returns a call of decide1 (one op) due by deadline, from a pool
// of calls whose argv lives in the call itself.
func (s *Store) newCall1(deadline time.Time) *call {
	c, _ := s.calls.Get().(*call)
	if c == nil {
		c = &call{e: &s.r.decide1, done: make(chan struct{}, 1)}
	}
	c.argv = append(c.space[:0], nil, nil, keysPerOp)
	c.deadline = deadline
	return c
}

// putCall1 returns c to the pool once nothing else can use it: it was
// answered (a call that expired or was abandoned may still be in a queue or
// a pipeline).
func (s *Store) putCall1(c *call) {
	if c.state.Load() != answered {
		return
	}
	clear(c.space[:])
	c.argv, c.res, c.err = nil, nil, nil
	c.state.Store(waiting)
	s.calls.Put(c)
}

// run runs c, bounded by its deadline and ctx. On a Cluster, c goes
// through the batcher of its node, and a failure names that node (see
// NodeError).
func (s *Store) run(ctx context.Context, c *call) error {
	var err error
	node := ""
	switch {
	case s.cluster != nil:
		node = s.nodeOfKey(c.argv[argvFirstKey].(string), c.deadline) // the first key: every key of a call shares its slot
		if s.batch != nil {
			err = s.batcherFor(node).do(ctx, c)
		} else {
			err = s.direct(ctx, c)
		}
	case s.batch != nil:
		err = s.batch.do(ctx, c)
	default:
		err = s.direct(ctx, c)
	}
	if err != nil {
		s.fault(err)
		if node != "" {
			return &NodeError{Node: node, Err: err}
		}
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
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

// Node returns the address of the Cluster master that serves key's
// identity (key as the Limiter builds it: identity, NUL, policy; or all
// identity), as the client's slot map has it now, or "" when the client is
// not a Cluster client or has not loaded its slot map yet (a call does). It
// lets core/guard keep one circuit breaker per node. While faults are
// recent it also asks the client to reload its slot map now and then (see
// fault), so that a failover is followed even when no call reaches the
// failed node.
func (s *Store) Node(key string) string {
	if s.cluster == nil || !s.stateOK.Load() {
		return "" // not before a call has loaded the slot map: Node never waits
	}
	s.reloadIfFaulted()
	id, _ := split(key)
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
func (s *Store) batcherFor(node string) *batcher {
	if m := s.batchers.Load(); m != nil {
		if b := (*m)[node]; b != nil {
			return b
		}
	}
	s.bmu.Lock()
	defer s.bmu.Unlock()
	old := map[string]*batcher{}
	if m := s.batchers.Load(); m != nil {
		if b := (*m)[node]; b != nil {
			return b
		}
		old = *m
	}
	next := make(map[string]*batcher, len(old)+1)
	if len(old) < maxNodes { // nodes come and go with failovers: bound them
		for k, b := range old {
			next[k] = b
		}
	}
	b := newBatcher(s, s.inflight, s.maxBatch)
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

// TakeAll decides ops all or nothing; see core.BatchStore.
//
// On a standalone server (a plain client, or Sentinel's failover client,
// that INFO shows talking to a Redis not in cluster mode) every key lives on
// one server, so the whole group, all identities, is decided by one atomic
// script: exactly as the memory store decides it under its lock.
//
// Elsewhere (Cluster, Ring, a proxy) the ops of one identity (one hash tag)
// are decided by one atomic script; the scripts of different identities go
// out together, and when one of them denies, the others' admissions are
// undone in a second round trip (see compensate). A failure of that second
// round trip never changes the decision: the group stays denied.
func (s *Store) TakeAll(ctx context.Context, ops []core.Op, out []core.Result) error {
	if len(out) != len(ops) {
		return fmt.Errorf("redisstore: TakeAll: %d results for %d ops", len(out), len(ops))
	}
	cps := make([]*compiled, len(ops))
	for i, op := range ops {
		cp, err := s.prepare(op.Key != "", op.Limit, op.Cost)
		if err != nil {
			return err
		}
		cps[i] = cp
	}
	deadline := time.Now().Add(s.timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// One call per identity, in the order identities first appear.
	var groups [][]int
	byTag := map[string]int{}
	for i, op := range ops {
		t, _ := split(op.Key)
		g, ok := byTag[t]
		if !ok {
			g = len(groups)
			byTag[t] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	if len(groups) > 1 && s.r.canBatch(ctx) {
		// One server holds every key: one script decides them all.
		all := make([]int, len(ops))
		for i := range all {
			all[i] = i
		}
		groups = [][]int{all}
	}
	calls := make([]*call, len(groups))
	for g, idx := range groups {
		if len(idx) == 1 { // one op: decide1
			i := idx[0]
			c := newCall(&s.r.decide1, keysPerOp, decide1Args, deadline)
			id, policy := split(ops[i].Key)
			c.argv = s.opKeys(c.argv, id, policy, ops[i].Limit.Algorithm)
			c.argv = append(c.argv, s.now(), cps[i].boxed, ops[i].Cost)
			calls[g] = c
			continue
		}
		c := newCall(&s.r.decide, keysPerOp*len(idx), argvHead+argsPerOp*len(idx), deadline)
		gcps, gops := make([]*compiled, len(idx)), make([]core.Op, len(idx))
		for j, i := range idx {
			id, policy := split(ops[i].Key)
			c.argv = s.opKeys(c.argv, id, policy, ops[i].Limit.Algorithm)
			gcps[j], gops[j] = cps[i], ops[i]
		}
		c.argv = s.args(c.argv, gcps, gops)
		calls[g] = c
	}
	if err := s.runAll(ctx, calls); err != nil {
		return err
	}
	ds := make([]decided, len(ops))
	// consumed[i]: op i's group was not denied, so its admissions happened.
	consumed := make([]bool, len(ops))
	denied := false
	for g, idx := range groups {
		res := calls[g].res
		if len(idx) > 1 && len(res) != opReply*len(idx) {
			return fmt.Errorf("redisstore: unexpected script reply %v", res)
		}
		groupDenied := false
		for j, i := range idx {
			if len(idx) > 1 {
				res = calls[g].res[opReply*j : opReply*j+opReply]
			}
			if err := s.decode(res, cps[i], &ds[i]); err != nil {
				return err
			}
			if !ds[i].o.Allowed && ops[i].Cost > 0 && !ops[i].Shadow {
				groupDenied = true
			}
		}
		for _, i := range idx {
			consumed[i] = !groupDenied && ds[i].o.Allowed && ops[i].Cost > 0
		}
		denied = denied || groupDenied
	}
	if denied && len(groups) > 1 {
		// The decision is made: a failure of the bookkeeping after it never
		// changes it (the units it could not give back stay consumed).
		s.compensate(ctx, ops, ds, consumed)
	}
	for i := range ops {
		out[i] = ds[i].result()
	}
	return nil
}

// compensate undoes the admissions of the ops that consumed (their group was
// not denied itself; a denying group consumed nothing): their units and
// their previous warning state are restored, and they are reported as the
// memory store reports them, allowed by their policy but unconsumed. It runs
// on ctx's deadline but not its cancellation (the caller leaving does not
// stop it). An op whose refund fails keeps its admission, is reported as its
// policy decided it (allowed), and is counted in Stats and logged.
func (s *Store) compensate(ctx context.Context, ops []core.Op, ds []decided, consumed []bool) {
	deadline, _ := ctx.Deadline()
	var calls []*call
	var which []int
	for i, op := range ops {
		if !consumed[i] {
			continue
		}
		if ds[i].overridden && ds[i].ovID == 0 {
			continue // an override written without an id: its state cannot be named
		}
		c := newCall(&s.r.refund, refundKeysPerOp, argvHead+refundArgsPerOp, deadline)
		c.argv = s.refundKeys(c.argv, op.Key, op.Limit.Algorithm, ds[i].ovID)
		// the admission decided at ds[i].o.At, undone as a decision just
		// received (its reset: a bucket's debt after it), and the warning state to
		// restore; under an override, on its state while it is the same
		c.argv = s.refundArgs(c.argv, ds[i].cp, strconv.Itoa(int(ds[i].o.Previous)), op.Cost, ds[i].o.At, max(ds[i].o.Reset, 0), ds[i].ovID)
		calls, which = append(calls, c), append(which, i)
	}
	if len(calls) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	errs := s.runEach(ctx, calls)
	var failed int
	var first error
	for j, i := range which {
		err := errs[j]
		var o algo.Outcome
		var res []int64
		if err == nil { // a call that failed may still be answered: its res is not ours
			res = calls[j].res
			if len(res) != refundReply {
				err = fmt.Errorf("redisstore: unexpected script reply %v", res)
			} else if err = outcome(res[:outcomeLen], &o); err != nil {
				err = fmt.Errorf("redisstore: %w", err)
			}
		}
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
			continue
		}
		if res[refundMade] == 0 {
			// The override it was made under was replaced in between
			// (cleared or ended): its state, and the units, are gone.
			continue
		}
		ds[i].o = o
		ds[i].o.Allowed, ds[i].o.Retry = true, 0
	}
	if failed > 0 {
		s.compensationFailed(failed, first)
	}
}

// compensationFailed counts refunds of a denied group that failed, and logs
// them at most once a second.
func (s *Store) compensationFailed(n int, err error) {
	total := s.failedComp.Add(uint64(n))
	now := time.Now().UnixNano()
	last := s.lastCompLog.Load()
	if now-last < int64(time.Second) || !s.lastCompLog.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("sluice: redisstore: a denied group's admissions could not all be given back; they stay consumed",
		"failed", n, "failed_total", total, "err", err)
}

// Stats counts what a Store did since New.
type Stats struct {
	// FailedCompensations is the number of admissions of denied groups
	// (Cluster, Ring, proxies: see TakeAll) that could not be given back
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

// runEach sends calls concurrently and returns the error of each.
func (s *Store) runEach(ctx context.Context, calls []*call) []error {
	errs := make([]error, len(calls))
	if len(calls) == 1 {
		errs[0] = s.run(ctx, calls[0])
		return errs
	}
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

// Refund gives back the cost units of key's admission decided at instant at
// (its Result.At), or nothing; see core.BatchStore. An admission under an
// override (override: its Result.Override) goes back to that override's
// state, under its limit, while it is in force, and gives back nothing once
// it has ended or been replaced; Redis checks which in the same call.
func (s *Store) Refund(ctx context.Context, key string, l core.Limit, cost int64, at int64, override uint64) error {
	cp, err := s.prepare(key != "", l, cost)
	if err != nil || cost == 0 {
		return err
	}
	deadline := time.Now().Add(s.timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c := newCall(&s.r.refund, refundKeysPerOp, argvHead+refundArgsPerOp, deadline)
	c.argv = s.refundKeys(c.argv, key, l.Algorithm, override)
	c.argv = s.refundArgs(c.argv, cp, "-1", cost, at, -1, override)
	return s.run(ctx, c)
}

// Reset deletes key's state under l.
func (s *Store) Reset(ctx context.Context, key string, l core.Limit) error {
	if _, err := s.prepare(key != "", l, 0); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Del(ctx, s.Key(key, l.Algorithm)).Err(); err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	return nil
}

// prepare checks a call on a key (hasKey: it is not empty) and returns its
// limit compiled.
func (s *Store) prepare(hasKey bool, l core.Limit, cost int64) (*compiled, error) {
	switch {
	case s.closed.Load():
		return nil, fmt.Errorf("redisstore: %w", core.ErrClosed)
	case !hasKey:
		return nil, fmt.Errorf("redisstore: %w", core.ErrNoKey)
	case cost < 0:
		return nil, fmt.Errorf("redisstore: %w: %d", core.ErrInvalidCost, cost)
	}
	cp, err := s.compile(l)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return cp, nil
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
