package redisstore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// States of a call.
const (
	waiting   int32 = iota
	answered        // its reply (or error) is in res and err
	expired         // its deadline passed first
	abandoned       // its caller's context ended first
)

// call is one decision on its way to Redis.
type call struct {
	e *entry
	// argv is the command: "fcall" or "evalsha" or "eval", the function,
	// SHA-1 or script, the number of keys, the keys, the arguments.
	argv     []any
	deadline time.Time
	res      []int64
	err      error
	// state moves once, from waiting to one of the others; whoever moves
	// it to answered or expired signals done (capacity 1). A queued call
	// that is no longer waiting is never sent, so it consumes nothing.
	state atomic.Int32
	done  chan struct{}
	one   [1]*call // the call itself, to send it alone without allocating
	// members are the one-op calls a decideMany call decides (see
	// runner.group).
	members []*call
	// space holds argv for a call of one op (see Store.newCall1).
	space [argvFirstKey + keysPerOp + decide1Args]any
}

// newCall returns a call of e with room for keys and args, due by deadline.
func newCall(e *entry, keys, args int, deadline time.Time) *call {
	c := &call{e: e, argv: make([]any, argvFirstKey, argvFirstKey+keys+args), deadline: deadline, done: make(chan struct{}, 1)}
	c.argv[argvFirstKey-1] = keys
	return c
}

// command returns the Redis command of the call.
func (c *call) command(ctx context.Context) *redis.IntSliceCmd {
	cmd := redis.NewIntSliceCmd(ctx, c.argv...)
	cmd.SetFirstKeyPos(argvFirstKey)
	return cmd
}

// finish moves a waiting call to state and wakes its caller; it reports
// whether it did (false: the call was no longer waiting).
func (c *call) finish(state int32) bool {
	if !c.state.CompareAndSwap(waiting, state) {
		return false
	}
	c.done <- struct{}{}
	return true
}

// wait returns the call's error once it is answered, context.DeadlineExceeded
// once its deadline has passed, or the context's error if it ends first.
func (c *call) wait(ctx context.Context) error {
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(waiting, abandoned) {
			return ctx.Err()
		}
		<-c.done // answered or expired meanwhile
	}
	if c.state.Load() == expired {
		return context.DeadlineExceeded
	}
	return c.err
}

// batcher pipelines concurrent decisions. A call that finds a free pipeline
// slot is sent at once (no added wait on an idle store); calls that find
// every slot busy queue, and the sender that finishes a pipeline sends the
// whole queue as the next one, on a goroutine of its own. Queued callers
// wait for their own result, their context or their deadline, so a stalled
// server never holds them past their timeout: one timer (the watchdog),
// armed only while calls wait, expires the calls whose deadline has passed,
// queued or in flight, instead of a timer per call.
type batcher struct {
	s         *Store
	maxActive int
	maxBatch  int
	mu        sync.Mutex
	active    int
	queue     []*call
	flying    [][]*call // the batches in flight
	watchdog  *time.Timer
	armed     time.Time // when the watchdog fires; zero: disarmed
}

func newBatcher(s *Store, maxActive, maxBatch int) *batcher {
	b := &batcher{s: s, maxActive: maxActive, maxBatch: maxBatch}
	b.watchdog = time.AfterFunc(time.Hour, b.expire)
	b.watchdog.Stop()
	return b
}

// do runs c, queued behind the pipelines in flight if there are maxActive.
func (b *batcher) do(ctx context.Context, c *call) error {
	b.mu.Lock()
	if b.active >= b.maxActive {
		b.queue = append(b.queue, c)
		b.arm(c.deadline)
		b.mu.Unlock()
		return c.wait(ctx)
	}
	b.active++
	b.mu.Unlock()
	err := b.s.direct(ctx, c)
	if next := b.next(nil); next != nil {
		go b.drain(next)
	}
	return err
}

// arm makes the watchdog fire by t at the latest.
func (b *batcher) arm(t time.Time) {
	if b.armed.IsZero() || t.Before(b.armed) {
		b.armed = t
		b.watchdog.Reset(time.Until(t))
	}
}

// expire is the watchdog: it expires every waiting call whose deadline has
// passed (a queued one leaves the queue: it is never sent), and rearms for
// the earliest deadline left.
func (b *batcher) expire() {
	now := time.Now()
	var next time.Time
	check := func(c *call) (gone bool) {
		if c.state.Load() != waiting {
			return true
		}
		if !c.deadline.After(now) {
			c.finish(expired)
			return true
		}
		if next.IsZero() || c.deadline.Before(next) {
			next = c.deadline
		}
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, batch := range b.flying {
		for _, c := range batch {
			check(c)
		}
	}
	b.queue = slices.DeleteFunc(b.queue, check)
	b.armed = time.Time{}
	if !next.IsZero() {
		b.arm(next)
	}
}

// next ends the batch in flight done (nil for a call sent directly) and
// takes the next batch off the queue, or releases the pipeline slot.
func (b *batcher) next(done []*call) []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	if done != nil {
		if i := slices.IndexFunc(b.flying, func(f []*call) bool { return &f[0] == &done[0] }); i >= 0 {
			b.flying = slices.Delete(b.flying, i, i+1)
		}
	}
	if len(b.queue) == 0 {
		b.active--
		return nil
	}
	n := min(len(b.queue), b.maxBatch)
	batch := append([]*call(nil), b.queue[:n]...)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	b.flying = append(b.flying, batch)
	return batch
}

// drain sends batches until the queue is empty. A batch leaves the flying
// list before its callers are woken: once woken, a call may be reused.
func (b *batcher) drain(batch []*call) {
	for batch != nil {
		live := b.send(batch)
		next := b.next(batch)
		for _, c := range live {
			c.finish(answered)
		}
		batch = next
	}
}

// send runs the calls of a batch still waiting as one pipeline and returns
// them.
func (b *batcher) send(batch []*call) []*call {
	live := make([]*call, 0, len(batch))
	for _, c := range batch {
		if c.state.Load() == waiting {
			live = append(live, c)
		}
	}
	if len(live) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), b.s.timeout)
		b.s.r.exec(ctx, live)
		cancel()
	}
	return live
}

// direct runs one call on the caller's goroutine, bounded by the call's
// deadline, when the client honours context deadlines on its sockets, and
// otherwise on a goroutine the caller can stop waiting for (go-redis ignores
// deadlines unless ContextTimeoutEnabled is set).
func (s *Store) direct(ctx context.Context, c *call) error {
	if d, ok := ctx.Deadline(); !ok || d.After(c.deadline) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.deadline)
		defer cancel()
	}
	if s.deadlines {
		s.run1(ctx, c)
		c.state.Store(answered)
		return c.err
	}
	go func() {
		s.run1(ctx, c)
		c.finish(answered)
	}()
	return c.wait(ctx)
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
