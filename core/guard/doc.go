// Package guard keeps a limiter answering when its store fails, and spares
// the store the requests it already knows the answer to.
//
// A guard.Store wraps a backend Store, usually the Redis store, and is used
// in its place:
//
//	rs, _ := redisstore.New(client)
//	gs, _ := guard.New(rs, guard.WithFallback(4), guard.WithDenyCache(guard.DenyCache{MaxKeys: 100_000}))
//	lim, _ := core.NewLimiter(gs, policies)
//
// Every backend call is bounded by a timeout (DefaultTimeout, 5 ms): its
// context's, or, for a backend that bounds its calls itself within it (the
// Redis store with a timeout of its own no longer, see Bounded), the
// backend's. A call that fails or times out is answered by the failure Mode:
//
//   - fail open (the default): the request is allowed, its Result marked
//     core.FailedOpen;
//   - fail closed: the request is denied with a short RetryAfter, marked
//     core.FailedClosed;
//   - fallback: a local in-memory limiter decides, with each limit divided
//     by the expected number of instances, marked core.FromFallback.
//
// A circuit breaker counts consecutive failures. When they reach
// Breaker.Failures the circuit opens: requests are answered by the Mode
// without touching the backend, so a dead Redis costs a few atomic loads per
// request instead of a timeout. After Breaker.Cooldown one request probes
// the backend; its success closes the circuit and enforcement through the
// backend resumes by itself. Every transition is logged with log/slog and
// reported to the Observers.
//
// A backend whose keys live on nodes that fail independently (the Redis
// store on a Cluster implements Sharded) gets one circuit per node: a dead
// master opens its own circuit and costs its own keys microseconds, while
// the keys of the live masters keep being decided by the backend. In
// ModeOpen, a group of keys spanning a node whose circuit is open still has
// its other keys decided by the backend.
//
// A guard.Store is a whole core.Store: a refund passes through the circuit
// of its key's node like a decision (dropped while it is open, counted as a
// failure when it fails), and an override or block set through it holds in
// the fallback limiter too.
//
// The deny cache (opt-in) remembers the backend's denials: a key denied
// until an instant is denied locally until then, so a single key flooding
// the service costs one backend call per denial period instead of one per
// request. It only repeats the backend's own answers, so it never allows
// what the backend would deny.
package guard
