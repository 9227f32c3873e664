package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/pipeline"
)

// call is one decision on its way to Redis.
type call struct {
	// Call is the batcher's part: the deadline, and the state of a call
	// queued for a pipeline.
	pipeline.Call
	e *entry
	// argv is the command: "fcall" or "evalsha" or "eval", the function,
	// SHA-1 or script, the number of keys, the keys, the arguments.
	argv []any
	res  []int64
	err  error
	one  [1]*call // the call itself, to send it alone without allocating
	// members are the one-op calls a decideMany call decides (see
	// runner.group).
	members []*call
	// space holds argv for a call of one op (see Store.newCall1), and keys
	// its keys, which argv holds as pointers to them (go-redis writes a
	// *string as the string: no allocation to box each key).
	space [argvFirstKey + keysPerOp + decide1Args]any
	keys  [keysPerOp]string
}

// firstKey returns the first key of the call, by which a Cluster routes
// it (every key of a call shares its slot).
func (c *call) firstKey() string {
	switch k := c.argv[argvFirstKey].(type) {
	case *string:
		return *k
	case string:
		return k
	}
	return ""
}

// newCall returns a call of e with room for keys and args, due by deadline.
func newCall(e *entry, keys, args int, deadline time.Time) *call {
	c := &call{e: e, argv: make([]any, argvFirstKey, argvFirstKey+keys+args)}
	c.Init(deadline)
	c.argv[argvFirstKey-1] = keys
	return c
}

// command returns the Redis command of the call.
func (c *call) command(ctx context.Context) *redis.IntSliceCmd {
	cmd := redis.NewIntSliceCmd(ctx, c.argv...)
	cmd.SetFirstKeyPos(argvFirstKey)
	return cmd
}

// newBatcher returns the batcher of one connection to Redis (a node of a
// Cluster, or the one server): it pipelines concurrent calls (see package
// internal/pipeline), one pipeline in flight at a time by default, and
// sends the one-op calls of a pipeline as one decideMany call where the
// server allows it (see runner.exec).
func (s *Store) newBatcher() *pipeline.Batcher[*call] {
	return pipeline.New(s.r.exec, pipeline.Options{Slots: s.inflight, MaxBatch: s.maxBatch, MaxWait: s.timeout})
}

// runOn runs c through b: at once, on the caller's goroutine, if a
// pipeline slot is free (no added wait on an idle store), else in the
// next pipeline. The call returns by its deadline, queued or in flight.
func (s *Store) runOn(ctx context.Context, b *pipeline.Batcher[*call], c *call) error {
	var err error
	switch {
	case !b.Acquire():
		err = b.Wait(ctx, c)
	case !b.Alone():
		err = b.Lead(ctx, c)
	default:
		err = s.direct(ctx, c)
		b.Release()
		return err
	}
	if err != nil {
		return err
	}
	return c.err
}

// direct runs one call on the caller's goroutine, bounded by the call's
// deadline, when the client honours context deadlines on its sockets, and
// otherwise on a goroutine the caller can stop waiting for (go-redis ignores
// deadlines unless ContextTimeoutEnabled is set).
func (s *Store) direct(ctx context.Context, c *call) error {
	if d, ok := ctx.Deadline(); !ok || d.After(c.Deadline()) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.Deadline())
		defer cancel()
	}
	if s.deadlines {
		s.run1(ctx, c)
		c.Settle()
		return c.err
	}
	go func() {
		s.run1(ctx, c)
		c.Answer()
	}()
	if err := c.Await(ctx); err != nil {
		return err
	}
	return c.err
}

// run1 runs one call on its own.
func (s *Store) run1(ctx context.Context, c *call) {
	c.one[0] = c
	s.r.exec(ctx, c.one[:])
}

// honoursDeadlines reports whether client's sockets respect context
// deadlines.
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}
