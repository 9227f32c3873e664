package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/lua"
)

// entry is one entry point of package lua: the function to FCALL and the
// same code as a script for EVALSHA (its SHA-1) and EVAL, each boxed once
// for go-redis.
type entry struct {
	fn, src, sha any
}

func newEntry(fn, src string) entry {
	sum := sha1.Sum([]byte(src))
	return entry{fn: fn, src: src, sha: hex.EncodeToString(sum[:])}
}

// runner sends calls as Redis Functions (FCALL of one library, whose code is
// defined once per FUNCTION LOAD rather than on every call), and as scripts
// (EVALSHA, EVAL on NOSCRIPT) where functions are off or unavailable.
type runner struct {
	client  redis.UniversalClient
	lib     lua.Library
	decide  entry
	decide1 entry
	// book is decide1 for a booking (with its booking argument): calls of
	// their own, which group never puts in a decideMany call.
	book       entry
	decideMany entry
	refund     entry
	// batching says whether the one-op calls of a pipeline may go as one
	// decideMany call (see canBatch).
	batching atomic.Int32
	groups   sync.Pool   // of decideMany calls, with their argv and members
	useFunc  atomic.Bool // false: scripts only
	loadMu   sync.Mutex  // one FUNCTION LOAD at a time
	loads    atomic.Uint64
	// strikes counts recoveries in a row that found the library already
	// loaded, and still no function when they called it again.
	strikes atomic.Int32
}

// maxStrikes is how many such recoveries switch the runner to scripts.
const maxStrikes = 3

func newRunner(client redis.UniversalClient, functions bool) *runner {
	r := &runner{client: client, lib: lua.NewLibrary()}
	r.decide = newEntry(r.lib.Decide, lua.Decide())
	r.decide1 = newEntry(r.lib.Decide1, lua.Decide1())
	r.book = r.decide1
	r.decideMany = newEntry(r.lib.DecideMany, lua.DecideMany())
	r.refund = newEntry(r.lib.Refund, lua.Refund())
	r.useFunc.Store(functions)
	return r
}

// exec runs calls (one command, or one pipeline) and sets each one's reply
// or error; on a server that allows it, the one-op calls among them go as
// one decideMany call (see group).
func (r *runner) exec(ctx context.Context, calls []*call) {
	calls, g := r.group(ctx, calls)
	r.execEach(ctx, calls)
	if g != nil {
		r.scatter(ctx, g)
		clear(g.argv)
		clear(g.members)
		g.argv, g.members, g.res, g.err = g.argv[:0], g.members[:0], nil, nil
		r.groups.Put(g)
	}
}

// execEach runs calls, one command each. With functions on, calls answered
// "Function not found" (a server that never had the library, or lost it to
// FUNCTION FLUSH, a restart or a failover) load the library and are sent
// again; if the server cannot run functions at all (Redis before 7, an ACL
// or a proxy that forbids them), the runner switches to scripts for good
// and those calls are sent as scripts.
func (r *runner) execEach(ctx context.Context, calls []*call) {
	if r.useFunc.Load() {
		loads := r.loads.Load()
		r.send(ctx, calls, false)
		if calls = r.recoverFunctions(ctx, calls, loads); len(calls) == 0 {
			return
		}
	}
	r.send(ctx, calls, true)
	// EVALSHA cannot fall back to EVAL inside a pipeline: the calls answered
	// NOSCRIPT are sent again with EVAL, which also loads the script.
	var retry []*call
	for _, c := range calls {
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			c.argv[0], c.argv[1] = "eval", c.e.src
			retry = append(retry, c)
		}
	}
	if len(retry) > 0 {
		r.process(ctx, retry)
	}
}

// recoverFunctions returns the calls to send again as scripts after calls
// were sent as functions (loads: the count of library loads before).
func (r *runner) recoverFunctions(ctx context.Context, calls []*call, loads uint64) []*call {
	missing, unsupported := failed(calls)
	if len(unsupported) > 0 {
		r.useFunc.Store(false)
		return append(unsupported, missing...)
	}
	if len(missing) == 0 {
		return nil
	}
	existed, err := r.load(ctx, loads)
	if err != nil {
		if unsupportedErr(err) {
			r.useFunc.Store(false)
		}
		return missing // as scripts, this time
	}
	r.send(ctx, missing, false)
	again, unsupported := failed(missing)
	switch {
	case len(unsupported) > 0:
		r.useFunc.Store(false)
	case len(again) == 0:
		r.strikes.Store(0)
	case existed && r.strikes.Add(1) >= maxStrikes:
		// The library is there, and calls do not find it, time after time:
		// something between the client and the server (a proxy) does not
		// send FUNCTION LOAD where it sends the calls. Scripts work there.
		// (A FUNCTION FLUSH between a load and the call retried does not
		// count: that load found no library.)
		r.useFunc.Store(false)
	}
	return append(again, unsupported...)
}

// failed returns the calls that failed because the library is missing and
// those that failed because the server does not run functions.
func failed(calls []*call) (missing, unsupported []*call) {
	for _, c := range calls {
		switch {
		case c.err == nil:
		case missingErr(c.err):
			missing = append(missing, c)
		case unsupportedErr(c.err):
			unsupported = append(unsupported, c)
		}
	}
	return missing, unsupported
}

// load loads the library on every node that may serve a key (each master of
// a Cluster, each shard of a Ring), unless another call loaded it since
// loads was read. It reports whether a node already had it.
func (r *runner) load(ctx context.Context, loads uint64) (existed bool, err error) {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	if r.loads.Load() != loads {
		return false, nil
	}
	var had atomic.Bool
	one := func(ctx context.Context, c redis.Cmdable) error {
		err := c.FunctionLoad(ctx, r.lib.Code).Err()
		if err != nil && redis.HasErrorPrefix(err, "Library") { // "Library '…' already exists"
			had.Store(true)
			return nil
		}
		return err
	}
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	default:
		err = one(ctx, r.client)
	}
	if err != nil {
		return false, err
	}
	r.loads.Add(1)
	return had.Load(), nil
}

// missingErr reports a reply meaning the library is not loaded.
func missingErr(err error) bool {
	return redis.HasErrorPrefix(err, "Function not found")
}

// unsupportedErr reports a reply meaning the server, or something between,
// does not let this client run or load functions: an unknown command (Redis
// before 7, a proxy) or an ACL refusal.
func unsupportedErr(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(re.Error())
	return strings.HasPrefix(msg, "noperm") || strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "unsupported command") || strings.Contains(msg, "not supported")
}

// send sends calls as functions, or as scripts (EVALSHA).
func (r *runner) send(ctx context.Context, calls []*call, scripts bool) {
	for _, c := range calls {
		if scripts {
			c.argv[0], c.argv[1] = "evalsha", c.e.sha
		} else {
			c.argv[0], c.argv[1] = "fcall", c.e.fn
		}
	}
	r.process(ctx, calls)
}

// process sends calls as they are, one command or one pipeline (split by
// node on a Cluster), and sets their replies.
func (r *runner) process(ctx context.Context, calls []*call) {
	if len(calls) == 1 {
		c := calls[0]
		cmd := c.command(ctx)
		_ = r.client.Process(ctx, cmd)
		c.res, c.err = cmd.Result()
		return
	}
	cmds := make([]*redis.IntSliceCmd, len(calls))
	_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = c.command(ctx)
			_ = p.Process(ctx, cmds[i])
		}
		return nil
	})
	for i, c := range calls {
		c.res, c.err = cmds[i].Result()
	}
}

// States of runner.batching.
const (
	batchUnknown int32 = iota
	batchOn
	batchOff
)

// canBatch reports whether several ops may go in one call. All the keys of
// a call must live on the server that runs it, so only a plain client on a
// standalone server qualifies (Sentinel's masters are): INFO tells a Redis
// in cluster mode, and a proxy that does not answer INFO (one that may
// spread keys over several servers behind one address) is never batched.
func (r *runner) canBatch(ctx context.Context) bool {
	switch r.batching.Load() {
	case batchOn:
		return true
	case batchOff:
		return false
	}
	c, ok := r.client.(*redis.Client)
	if !ok {
		r.batching.Store(batchOff)
		return false
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) { // refused: ask no more
			r.batching.Store(batchOff)
		}
		return false // otherwise, ask again next time
	}
	if strings.Contains(info, "redis_mode:standalone") || strings.Contains(info, "server_mode:standalone") {
		r.batching.Store(batchOn)
		return true
	}
	r.batching.Store(batchOff)
	return false
}

// group returns calls with their one-op calls (decide1) replaced by one
// decideMany call holding them as members, when there are two or more on
// one instant (the first one's: Redis TIME, unless the store has a clock)
// and the server allows it (canBatch); otherwise it returns calls
// unchanged. The members' distinct limits are sent once (see protocol.go).
func (r *runner) group(ctx context.Context, calls []*call) ([]*call, *call) {
	n := 0
	var now any
	for _, c := range calls {
		if c.e != &r.decide1 {
			continue
		}
		if n == 0 {
			now = c.argv[argv1Now]
		}
		if c.argv[argv1Now] == now {
			n++
		}
	}
	if n < 2 || !r.canBatch(ctx) {
		return calls, nil
	}
	g, _ := r.groups.Get().(*call)
	if g == nil {
		g = &call{e: &r.decideMany}
	}
	g.argv = append(g.argv, nil, nil, manyKeysPerOp*n)
	out := make([]*call, 0, len(calls)-n+1)
	var space [8]any
	lims := space[:0]
	for _, c := range calls {
		if c.e != &r.decide1 || c.argv[argv1Now] != now {
			out = append(out, c)
			continue
		}
		g.members = append(g.members, c)
		g.argv = append(g.argv, c.argv[argvFirstKey:argvFirstKey+manyKeysPerOp]...)
		if lim := c.argv[argv1Limit]; !slices.Contains(lims, lim) {
			lims = append(lims, lim)
		}
	}
	if cost := g.members[0].argv[argv1Cost]; len(lims) == 1 && sameCost(g.members, cost) {
		// one limit and one cost for every op, sent once
		g.argv = append(g.argv, now, 0, lims[0], cost)
		return append(out, g), g
	}
	g.argv = append(g.argv, now, len(lims))
	g.argv = append(g.argv, lims...)
	for _, c := range g.members {
		if len(lims) > 1 {
			g.argv = append(g.argv, slices.Index(lims, c.argv[argv1Limit])+1)
		}
		g.argv = append(g.argv, c.argv[argv1Cost])
	}
	return append(out, g), g
}

// sameCost reports whether every one of calls (decide1) has the cost cost.
func sameCost(calls []*call, cost any) bool {
	for _, c := range calls {
		if c.argv[argv1Cost] != cost {
			return false
		}
	}
	return true
}

// scatter hands the reply of a decideMany call to its members. A member that
// failed is sent again alone, to learn its error; so are all of them if the
// server refused the keys together (CROSSSLOT: it spreads them over shards),
// and ops are not batched again.
func (r *runner) scatter(ctx context.Context, g *call) {
	var again []*call
	switch {
	case g.err != nil && redis.HasErrorPrefix(g.err, "CROSSSLOT"):
		r.batching.Store(batchOff)
		again = g.members
	case g.err != nil:
		for _, c := range g.members {
			c.err = g.err
		}
	default:
		res, k := g.res, 1 // res[0]: the instant of the call, each op's relative to it
		for _, c := range g.members {
			n := 0
			if k < len(res) {
				n = shortLenOf(res[k])
			}
			switch {
			case n == -1:
				again = append(again, c)
				k++
			case n > 0 && k+n <= len(res):
				res[k+shortAt] += res[0]
				c.res, c.err = res[k:k+n:k+n], nil
				k += n
			default:
				c.err = fmt.Errorf("unexpected reply %v", res)
			}
		}
	}
	if len(again) > 0 {
		r.execEach(ctx, again)
	}
}
