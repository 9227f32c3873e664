package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/storekit"
	"github.com/sluicehq/sluice/internal/exact"
)

// Take decides ops all or nothing; see core.Store. One op is one atomic
// script call (pipelined with the concurrent others); for several, see
// takeAll.
func (s *Store) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	if len(out) != len(ops) {
		return fmt.Errorf("redisstore: Take: %d results for %d ops", len(out), len(ops))
	}
	switch len(ops) {
	case 0:
		return nil
	case 1:
		op := &ops[0]
		cp, err := s.prepare(op.Key, op.Limit, op.Cost)
		if err == nil && op.MaxDelay < 0 {
			err = storekit.ValidateBooking(op.MaxDelay, 1)
		}
		if err != nil {
			return fmt.Errorf("redisstore: Take: %w", storekit.FieldIn("ops[0]", err))
		}
		if op.MaxDelay > 0 {
			return s.book(ctx, cp, op, &out[0])
		}
		return s.take(ctx, cp, op, &out[0])
	}
	if err := storekit.ValidateGroup(ops); err != nil {
		return fmt.Errorf("redisstore: Take: %w", err)
	}
	if err := sharedKeys(ops); err != nil {
		return fmt.Errorf("redisstore: Take: %w", err)
	}
	return s.takeAll(ctx, ops, out)
}

// sharedKeys reports two ops whose distinct Keys have the same Redis keys:
// a Policy holding a NUL is cut at it (see parts), so Key{"a\x00b", "c"}
// and Key{"a", "b\x00c"} share their state, and decided in one Take they
// would each see the other's units as free (as two ops of one Key, see
// storekit.ValidateGroup). The Limiter's policy names never hold a NUL.
func sharedKeys(ops []core.Op) error {
	nul := false
	for i := range ops {
		nul = nul || strings.IndexByte(ops[i].Key.Policy, 0) >= 0
	}
	if !nul {
		return nil
	}
	for i := range ops {
		id, policy := parts(ops[i].Key)
		for j := range i {
			if jd, jp := parts(ops[j].Key); jd == id && jp == policy {
				return &core.FieldError{Field: fmt.Sprintf("ops[%d].Key", i), Message: fmt.Sprintf("op %d has the same Redis keys", j), Err: core.ErrInvalidCost}
			}
		}
	}
	return nil
}

// book decides a booking of one op into res: decide1 with its booking
// argument (the longest booking in µs, an exact Lua number; the script
// cuts it to what the bucket of the limit applied can book, the op's or an
// override's, which only it knows, and a window ignores it), as a call of
// its own that is never grouped with others (see runner.group).
func (s *Store) book(ctx context.Context, cp *compiled, op *core.Op, res *core.Result) error {
	c := newCall(&s.r.book, keysPerOp, decide1Args+1, time.Now().Add(s.timeout))
	s.decide1Argv(c, cp, op)
	c.argv = append(c.argv, min(int64(op.MaxDelay/time.Microsecond), exact.Max))
	if err := s.run(ctx, c); err != nil {
		return err
	}
	var d decided
	if err := s.decode(c.res, cp, &d); err != nil {
		return err
	}
	*res = d.result()
	return nil
}

// take decides one op into res.
func (s *Store) take(ctx context.Context, cp *compiled, op *core.Op, res *core.Result) error {
	c := s.newCall1(time.Now().Add(s.timeout))
	s.decide1Argv(c, cp, op)
	err := s.run(ctx, c)
	var d decided
	if err == nil {
		err = s.decode(c.res, cp, &d)
	}
	s.putCall1(c)
	if err != nil {
		return err
	}
	*res = d.result()
	return nil
}

// decide1Argv appends to c's argv the KEYS and ARGV of decide1 for op (see
// protocol.go): its keys, which c holds, the instant, its limit compiled
// (cp) and its cost.
func (s *Store) decide1Argv(c *call, cp *compiled, op *core.Op) {
	s.keysOf(&c.keys, op.Key, op.Limit.Algorithm)
	c.argv = append(c.argv, &c.keys[0], &c.keys[1], &c.keys[2], s.now(), cp.boxed, op.Cost)
}

// newCall1 returns a call of decide1 (one op) due by deadline, from a pool
// of calls whose argv lives in the call itself.
func (s *Store) newCall1(deadline time.Time) *call {
	c, _ := s.calls.Get().(*call)
	if c == nil {
		c = &call{e: &s.r.decide1}
	}
	c.argv = append(c.space[:0], nil, nil, keysPerOp)
	c.Init(deadline)
	return c
}

// putCall1 returns c to the pool once nothing else can use it: it was
// answered (a call that expired or was abandoned may still be in a queue or
// a pipeline).
func (s *Store) putCall1(c *call) {
	if !c.Answered() {
		return
	}
	clear(c.space[:])
	c.keys = [keysPerOp]string{}
	c.argv, c.res, c.err = nil, nil, nil
	s.calls.Put(c)
}

// takeAll decides several ops all or nothing.
//
// On a standalone server (a plain client, or Sentinel's failover client,
// that INFO shows talking to a Redis not in cluster mode) every key lives on
// one server, so the whole group, all identities, is decided by one atomic
// script: exactly as the memory store decides it under its lock.
//
// Elsewhere (Cluster, Ring, a proxy) the ops of one identity (one hash tag)
// are decided by one atomic script, every script at the group's one
// instant (groupNow); the scripts of different identities go out together,
// undoable, and when one of them denies, the others' admissions are undone
// in a second round trip (see compensate). A failure of that second
// round trip never changes the decision: the group stays denied. The
// scripts run to the store's deadline whatever the caller's cancellation
// (cut, some would run and others not), and when one of them fails the
// Take fails and the admissions of those that answered are undone too
// (undoAnswered).
func (s *Store) takeAll(ctx context.Context, ops []core.Op, out []core.Result) error {
	cps, err := s.compileOps(ops)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(s.timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	groups := s.identityGroups(ctx, ops)
	// Several scripts decide the group on one instant, and undoably: a
	// denied group's admissions are taken back exactly (see compensate).
	undoable := len(groups) > 1
	now := s.now()
	if undoable {
		first := ops[groups[0][0]]
		t, err := s.groupNow(ctx, s.Key(first.Key, first.Limit.Algorithm))
		if err != nil {
			return err
		}
		now = t
	}
	calls := s.groupCalls(ops, cps, groups, now, undoable, deadline)
	if err := s.runGroups(ctx, deadline, now, ops, cps, groups, calls); err != nil {
		return err
	}
	ds, consumed, denied, err := s.readGroups(ops, cps, groups, calls, undoable)
	if err != nil {
		return err
	}
	if denied && len(groups) > 1 {
		// The decision is made: a failure of the bookkeeping after it never
		// changes it (the units it could not give back stay consumed).
		s.compensate(ctx, now, ops, ds, consumed)
	}
	for i := range ops {
		out[i] = ds[i].result()
	}
	return nil
}

// compileOps compiles each op's limit and cost; the error names the op.
func (s *Store) compileOps(ops []core.Op) ([]*compiled, error) {
	cps := make([]*compiled, len(ops))
	for i, op := range ops {
		cp, err := s.prepare(op.Key, op.Limit, op.Cost)
		if err != nil {
			return nil, fmt.Errorf("redisstore: Take: %w", storekit.FieldIn(fmt.Sprintf("ops[%d]", i), err))
		}
		cps[i] = cp
	}
	return cps, nil
}

// identityGroups returns the indexes of ops by identity (hash tag), in the
// order identities first appear: one group, one script call, each. On a
// server that holds every key (canBatch) it is one group of them all.
func (s *Store) identityGroups(ctx context.Context, ops []core.Op) [][]int {
	var groups [][]int
	byTag := map[string]int{}
	for i, op := range ops {
		t, _ := parts(op.Key)
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
	return groups
}

// runGroups runs the groups' calls. Several scripts decide the group: the
// caller leaving must not stop some of them and not the others (one
// identity charged, the next not). They run to the deadline; if one still
// fails, the admissions of those that answered are given back.
func (s *Store) runGroups(ctx context.Context, deadline time.Time, now any, ops []core.Op, cps []*compiled, groups [][]int, calls []*call) error {
	if len(calls) <= 1 {
		return s.runAll(ctx, calls)
	}
	rctx, rcancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer rcancel()
	errs := s.runEach(rctx, calls)
	for _, err := range errs {
		if err != nil {
			s.undoAnswered(rctx, now, ops, groups, calls, errs, cps)
			return err
		}
	}
	return nil
}

// readGroups decodes the replies of the groups' calls: each op's decision,
// whether it consumed (its group was not denied, so its admissions
// happened), and whether any group denied.
func (s *Store) readGroups(ops []core.Op, cps []*compiled, groups [][]int, calls []*call, undoable bool) ([]decided, []bool, bool, error) {
	stride := opReply
	if undoable {
		stride += undoLen
	}
	ds := make([]decided, len(ops))
	consumed := make([]bool, len(ops))
	denied := false
	for g, idx := range groups {
		if len(calls[g].res) != stride*len(idx) {
			return nil, nil, false, fmt.Errorf("redisstore: unexpected script reply %v", calls[g].res)
		}
		groupDenied := false
		for j, i := range idx {
			res := calls[g].res[stride*j : stride*j+stride]
			err := s.decodeOp(res, cps[i], &ds[i], false)
			if undoable {
				err = s.decodeUndoable(res, cps[i], &ds[i])
			}
			if err != nil {
				return nil, nil, false, err
			}
			groupDenied = groupDenied || !ds[i].o.Allowed && ops[i].Cost > 0 && !ops[i].Shadow
		}
		for _, i := range idx {
			consumed[i] = !groupDenied && ds[i].o.Allowed && ops[i].Cost > 0
		}
		denied = denied || groupDenied
	}
	return ds, consumed, denied, nil
}

// groupCalls returns one decide call per group of ops (the indexes of
// each), at the instant now, undoable or not.
func (s *Store) groupCalls(ops []core.Op, cps []*compiled, groups [][]int, now any, undoable bool, deadline time.Time) []*call {
	calls := make([]*call, len(groups))
	for g, idx := range groups {
		c := newCall(&s.r.decide, keysPerOp*len(idx), argvHead+argsPerOp*len(idx)+1, deadline)
		gcps, gops := make([]*compiled, len(idx)), make([]core.Op, len(idx))
		for j, i := range idx {
			c.argv = s.opKeys(c.argv, ops[i].Key, ops[i].Limit.Algorithm)
			gcps[j], gops[j] = cps[i], ops[i]
		}
		c.argv = s.args(c.argv, now, gcps, gops)
		if undoable {
			c.argv = append(c.argv, "1")
		}
		calls[g] = c
	}
	return calls
}

// undoAnswered gives back the admissions of the groups whose scripts
// answered when another group's failed: the Take fails, so nothing it
// decided may stay consumed (a failed script that ran all the same, its
// answer lost, cannot be named: its units stay).
func (s *Store) undoAnswered(ctx context.Context, now any, ops []core.Op, groups [][]int, calls []*call, errs []error, cps []*compiled) {
	ds := make([]decided, len(ops))
	consumed := make([]bool, len(ops))
	const stride = opReply + undoLen
	for g, idx := range groups {
		if errs[g] != nil || len(calls[g].res) != stride*len(idx) {
			continue
		}
		ok, denied := true, false
		for j, i := range idx {
			if err := s.decodeUndoable(calls[g].res[stride*j:stride*j+stride], cps[i], &ds[i]); err != nil {
				ok = false
				break
			}
			denied = denied || !ds[i].o.Allowed && ops[i].Cost > 0 && !ops[i].Shadow
		}
		if !ok || denied { // a denying group consumed nothing
			continue
		}
		for _, i := range idx {
			consumed[i] = ds[i].o.Allowed && ops[i].Cost > 0
		}
	}
	s.compensate(ctx, now, ops, ds, consumed)
}

// compensate undoes the admissions of the ops that consumed (their group was
// not denied itself; a denying group consumed nothing), at the instant now
// the group was decided at: each state is put back exactly as it was before
// the admission (its value, expiry and warning state, see undo in
// lua/refund.lua) when nothing else has changed it since, and otherwise its
// units and its previous warning state are given back by the refund rule;
// they are reported as the memory store reports them, allowed by their
// policy but unconsumed. It runs on ctx's deadline but not its
// cancellation (the caller leaving does not stop it). An op whose refund
// fails keeps its admission, is reported as its policy decided it
// (allowed), and is counted in Stats and logged.
func (s *Store) compensate(ctx context.Context, now any, ops []core.Op, ds []decided, consumed []bool) {
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
		c.argv = s.refundArgs(c.argv, now, ds[i].cp, strconv.Itoa(int(ds[i].o.Previous)), op.Cost, ds[i].o.At, ds[i].undoArg(), ds[i].ovID)
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

// Refund gives back the units of the admission a, or nothing; see
// core.Store. An admission under an override (a.Override: its
// Result.Override) goes back to that override's state, under its limit,
// while it is in force, and gives back nothing once it has ended or been
// replaced; Redis checks which in the same call.
func (s *Store) Refund(ctx context.Context, a core.Admission) error {
	cp, err := s.prepare(a.Key, a.Limit, a.Cost)
	if err != nil {
		return fmt.Errorf("redisstore: Refund: %w", err)
	}
	if a.Cost == 0 {
		return nil
	}
	deadline := time.Now().Add(s.timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c := newCall(&s.r.refund, refundKeysPerOp, argvHead+refundArgsPerOp, deadline)
	c.argv = s.refundKeys(c.argv, a.Key, a.Limit.Algorithm, a.Override)
	c.argv = s.refundArgs(c.argv, s.now(), cp, "-1", a.Cost, a.At, int64(-1), a.Override)
	return s.run(ctx, c)
}

// groupNow returns the one instant a group decided by several scripts is
// decided at, in µs: the store's clock, or Redis TIME on the master of key
// (the group's first), read once for every script of the group and for
// the undo of its admissions.
func (s *Store) groupNow(ctx context.Context, key string) (any, error) {
	if s.clock != nil {
		return s.clock().UnixMicro(), nil
	}
	var c redis.Cmdable = s.client
	node := ""
	if s.cluster != nil {
		m, err := s.cluster.MasterForKey(ctx, key)
		if err != nil {
			s.fault(err)
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		c, node = m, m.Options().Addr
	}
	t, err := s.serverTime(ctx, c)
	if err != nil {
		s.fault(err)
		if node != "" {
			return nil, &NodeError{Node: node, Err: err}
		}
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return t.UnixMicro(), nil
}

// serverTime reads TIME from c within ctx's deadline, on a goroutine the
// caller stops waiting for when the client does not honour deadlines on its
// sockets (see direct).
func (s *Store) serverTime(ctx context.Context, c redis.Cmdable) (time.Time, error) {
	if s.deadlines {
		return c.Time(ctx).Result()
	}
	type reply struct {
		t   time.Time
		err error
	}
	done := make(chan reply, 1)
	go func() {
		t, err := c.Time(ctx).Result()
		done <- reply{t, err}
	}()
	select {
	case r := <-done:
		return r.t, r.err
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// Reset deletes k's state under l.
func (s *Store) Reset(ctx context.Context, k core.Key, l core.Limit) error {
	if _, err := s.prepare(k, l, 0); err != nil {
		return fmt.Errorf("redisstore: Reset: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Del(ctx, s.Key(k, l.Algorithm)).Err(); err != nil {
		return fmt.Errorf("redisstore: Reset: %w", err)
	}
	return nil
}

// errNoIdentity is the error of an op or a key without an identity.
var errNoIdentity = &core.FieldError{Field: "Key.Identity", Message: "empty key", Err: core.ErrNoKey}

// prepare checks one op (closed store, key, cost, limit: an error names the
// field) and returns its limit compiled.
func (s *Store) prepare(k core.Key, l core.Limit, cost int64) (*compiled, error) {
	switch {
	case s.closed.Load():
		return nil, core.ErrClosed
	case k.Identity == "":
		return nil, errNoIdentity
	case cost < 0:
		return nil, &core.FieldError{Field: "Cost", Message: fmt.Sprintf("must not be negative, got %d", cost), Err: core.ErrInvalidCost}
	}
	cp, err := s.compile(l)
	if err != nil {
		return nil, storekit.FieldIn("Limit", err)
	}
	return cp, nil
}
