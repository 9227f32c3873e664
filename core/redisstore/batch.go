package redisstore

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// call is one decision on its way to Redis.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	res    []int64
	err    error
	done   chan struct{}
	// gone is set by a caller that stopped waiting; a queued call that is
	// gone is never sent, so it consumes nothing.
	gone atomic.Bool
}

// batcher pipelines concurrent decisions. A call that finds a free pipeline
// slot is sent at once (no timer, no added wait on an idle store); calls that
// find every slot busy queue, and the sender that finishes a pipeline sends
// the whole queue as the next one, on a goroutine of its own. Queued callers
// wait for their own result or their deadline, so a stalled server never
// holds them past their timeout.
type batcher struct {
	s         *Store
	maxActive int
	maxBatch  int
	mu        sync.Mutex
	active    int
	queue     []*call
}

func (b *batcher) do(ctx context.Context, c *call) error {
	b.mu.Lock()
	if b.active >= b.maxActive {
		c.done = make(chan struct{})
		b.queue = append(b.queue, c)
		b.mu.Unlock()
		return c.wait(ctx)
	}
	b.active++
	b.mu.Unlock()
	err := b.s.send(ctx, c)
	if next := b.next(); next != nil {
		go b.drain(next)
	}
	return err
}

// wait returns the call's error once it is answered, or the context's error
// first; a call abandoned before it is sent is never sent.
func (c *call) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		c.gone.Store(true)
		return ctx.Err()
	}
}

// next takes the next batch off the queue, or releases the pipeline slot.
func (b *batcher) next() []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.active--
		return nil
	}
	n := min(len(b.queue), b.maxBatch)
	batch := append([]*call(nil), b.queue[:n]...)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

func (b *batcher) drain(batch []*call) {
	for batch != nil {
		b.send(batch)
		batch = b.next()
	}
}

// send runs a batch as one pipeline and wakes its callers.
func (b *batcher) send(batch []*call) {
	live := batch[:0:0]
	for _, c := range batch {
		if c.gone.Load() {
			close(c.done)
		} else {
			live = append(live, c)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.s.timeout)
	defer cancel()
	switch len(live) {
	case 0:
	case 1: // EVALSHA with the EVAL fallback
		live[0].res, live[0].err = b.s.eval(ctx, live[0])
	default:
		b.s.pipeline(ctx, live)
	}
	for _, c := range live {
		close(c.done)
	}
}

// eval runs one call: EVALSHA, and EVAL when the server lost the script.
func (s *Store) eval(ctx context.Context, c *call) ([]int64, error) {
	return c.script.Run(ctx, s.client, c.keys, c.args...).Int64Slice()
}

// send runs one call in the caller's goroutine when the client honours
// context deadlines on its sockets, and otherwise on a goroutine the caller
// can stop waiting for (go-redis ignores deadlines unless
// ContextTimeoutEnabled is set).
func (s *Store) send(ctx context.Context, c *call) error {
	if s.deadlines {
		c.res, c.err = s.eval(ctx, c)
		return c.err
	}
	c.done = make(chan struct{})
	go func() {
		c.res, c.err = s.eval(ctx, c)
		close(c.done)
	}()
	return c.wait(ctx)
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

// pipeline runs calls in one pipeline (split by node on a Cluster). EVALSHA
// cannot fall back to EVAL inside a pipeline, so calls answered NOSCRIPT are
// sent again with EVAL, which also reloads the script.
func (s *Store) pipeline(ctx context.Context, calls []*call) {
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = c.script.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	var retry []int
	for i, c := range calls {
		c.res, c.err = cmds[i].Int64Slice()
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return
	}
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range retry {
			cmds[i] = calls[i].script.Eval(ctx, p, calls[i].keys, calls[i].args...)
		}
		return nil
	})
	for _, i := range retry {
		calls[i].res, calls[i].err = cmds[i].Int64Slice()
	}
}
