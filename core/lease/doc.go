// Package lease decides a limit's requests in memory, at the memory
// store's speed, from blocks of units each instance takes from the shared
// store, and never lets the shared store admit more than the limit.
//
// A block is an ordinary admission: one Take of cost N at one instant,
// decided atomically by the store below like any other. The instance then
// decides requests from those N units without calling the store, and gives
// back the units it did not use with the store's exact refund. Every unit
// an instance admits was admitted by the store first, so a fleet of
// instances, each deciding from its own blocks, admits no more than one
// store would, provided each unit is spent where the algorithm would still
// have had it: the rules below.
//
//	rs, _ := redisstore.New(client)
//	gs, _ := guard.New(rs, guard.WithFailClosed(0))
//	ls, _ := lease.New(gs)
//	lim, _ := core.NewLimiter(ls, []core.Policy{{
//		Name:  "global",
//		Key:   keyfunc.Const("all"),
//		Limit: core.PerSecond(500_000).WithAlgorithm(core.FixedWindow),
//		Lease: 100 * time.Millisecond, // each block held at most 100 ms
//	}})
//
// Only the ops of policies with a Lease (core.Policy.Lease, carried as
// core.Op.Lease) are leased. Every other op, a booking (core.Op.MaxDelay),
// and every call but Take and Refund go to the store below as they are.
//
// # The algorithms
//
// Fixed window and sliding window counter: both count only how many units
// each window holds, so a unit spent anywhere in the window its block was
// taken in is one the store counted there. A block ends with its window
// (at the latest at the local instant its take was sent plus what the
// store said was left of the window) and with its hold; its unused units
// are then given back, an exact refund while the window lasts.
//
// Token bucket, leaky bucket and GCRA: a bucket refills as time passes, so
// a unit taken at one instant and spent later is exact only while the
// bucket would still have had it. The next unit of a block is spent at now
// only while now ≤ TAT − left × T, where TAT is the bucket's theoretical
// arrival time after the take (the local instant the take was sent plus
// its ResetAfter), left the block's units still unused, and T =
// Period/Rate, as if every unit left were taken at its deadline. A
// bucket's block therefore serves a key that is at or over its rate (its
// TAT ahead of now) and ends within a unit's worth of time under it: a key
// under its rate is decided one call at a time, as without a lease. A
// bucket's unused units are never given back, and the refund of a leased
// bucket's admission gives nothing back: a refund lowers the bucket under
// every admission made after the refunded one, so under the blocks other
// instances took since, which would then spend units the bucket no longer
// has (a refund exact for the one admission over-admits for the fleet).
// Units not given back drain away within Capacity × T.
//
// Sliding window log: not leased. Each admission counts at its own
// instant until that instant leaves the window; units taken at once and
// spent later would be counted at the wrong instants. core.NewLimiter
// refuses a Lease on such a policy (core.ValidateLease).
//
// # Block sizes
//
// An instance sizes a key's next block from the rate at which it decides
// that key (smoothed over its store calls) times the hold, capped by twice
// its last block plus the op's cost (a block grows from one unit), by the
// time left in a window, by a share (WithShare) of what the store last
// said was left, by the limit's capacity and by WithMaxBlock. Near the
// limit the share caps every block at the op's own cost: the instance asks
// the store for each op, exactly as without a lease, and the last units of
// a limit are never parked at one instance. A take that finds nothing left
// beyond it gives a window's block back at once. Instances that share a
// key take blocks in proportion to their own traffic.
//
// A denial from the store is repeated for the same or a larger cost until
// its RetryAfter or the hold has passed, whichever comes first
// (core.FromDenyCache).
//
// # What a decision from a block says
//
// Allowed; Remaining, the units of this instance's block left after the
// decision: what the instance can promise (the rest of the shared quota
// may be spent by others meanwhile); State, the shared key's warning state
// at the block's take, its usage counting every unit held then, and
// Previous the same (no transition); ResetAfter, for a window the take's,
// aged (the window's end is fixed), for a bucket Capacity × T, the longest
// any bucket takes to drain (another instance may have filled it since);
// RetryAfter zero; At, the take's instant on the store's clock plus the
// time since. A repeated denial is the store's denial with its waits aged
// from when it arrived, so a retry at RetryAfter is never earlier than the
// store would say. None promises more than the shared state held at the
// instance's last store call for the key, at most one hold ago.
//
// # Bounds
//
// Over-admission: none, on the store's clock, across any number of
// instances, with refunds, rebuilt layers and killed processes.
//
// Under-admission: a request refused at one instance while units of the
// limit are parked at others finds at most, at each other instance i, the
// unused units of its current block: min(rate_i × Lease, Share ×
// Remaining at the take, MaxBlock). A window's come back when their hold
// ends (within WithSweepInterval of it, if the instance is idle), when the
// store answers a take with nothing left, and at the window's end; a
// bucket's drain within Capacity × T. A killed instance's units come back
// with its blocks' windows (a sliding window counter's weigh in the next
// window too, decaying), a bucket's as it drains.
//
// # Outages and the guard
//
// Put the guard (package core/guard) under the lease layer: core.Limiter,
// then lease, then guard, then the Redis or remote store. With the store
// down, an instance keeps deciding from the blocks it holds, exactly,
// until they end; its next take is then answered by the guard's failure
// mode, which the layer passes on as it is (no block is taken from a
// failure policy's answer, and the key's ops go straight to the guard, one
// each, for 10 ms at a time while it answers so). Unused units it cannot give back are counted in
// Stats.GiveBackFailures and come back as above.
//
// # Clocks
//
// Blocks are timed by the monotonic clock: a step of the instance's wall
// clock changes nothing. The store's instants (Redis TIME) map onto it at
// each take; a store clock found behind that mapping (it stepped back)
// shortens the next block by the step. WithClock replaces the clock for
// tests: its steps forward are time passing, its steps back are not.
//
// # Overrides, resets and changed limits
//
// A key found under an override (core.Result.Applied) is decided by the
// store, exactly, for a hold at a time. SetOverride and ClearOverride
// through this layer end its block of the key first; another instance's
// block of it decides from its units until its hold ends, as a Reset
// elsewhere leaves this instance's units. An op of a key under another
// limit (a policy changed) ends the key's block, giving its units back.
//
// # Groups
//
// A Take of several ops is all or nothing, as the store's: a leased op that
// a repeated denial refuses refuses the group before the store is asked;
// otherwise the store decides the other ops in one Take, and then each
// leased op is decided as alone. When a leased op is then refused, the
// store's admissions are given back (exactly: they are of policies no
// instance leases) and so are the leased ones (a window's to its block; a
// bucket's units are lost, as any bucket refund under a lease).
package lease
