// Package algo holds the six rate-limiting algorithms of sluice as pure step
// functions: each takes the stored state of one key, the current instant, the
// compiled Limit (a Spec) and a cost, and returns the new state and an Outcome.
// The in-memory store runs them under a shard lock; the Redis scripts in lua/
// are line-for-line ports of them, and a differential test holds the two to the
// same answers.
//
// # Time and exactness
//
// Instants are integer microseconds. No step uses floating point: the bucket
// algorithms measure time in units of 1/Q µs, where Q = Rate/gcd(Period, Rate),
// so that the emission interval T = Period/Rate is a whole number of units and
// nothing drifts. Every bound is checked by core.Limit.Validate to stay below
// 2^53, so the Lua ports compute the same integers.
//
// # Clock steps
//
// Per key, time never runs backwards: a decision at an instant earlier than
// the latest instant the key's state records is decided at that instant (the
// log's newest entry, the start of a window's stored window), and
// Outcome.At says which instant that was. A bucket records no instant: its
// debt TAT-now only grows when now moves back, so it is already at least as
// full as at any later instant. A key whose state is gone (fresh again)
// records nothing. The Lua ports follow the same rule; docs/algorithms.md
// gives the details.
//
// # Refunds
//
// Refund and RefundLog undo exactly the admission decided at a given
// instant, or give back nothing: a window's count only if the admission is in
// a window that still counts, a log's entry at that very instant, a bucket's
// TAT by the part of the admission not drained yet, bounded by the latest
// instant the key is known to have seen (max(now, at, TAT-Full)). Each
// admission may be refunded once.
//
// # Booking
//
// Book admits a cost at its slot, the earliest whole µs at which Step would
// admit it, when that slot is within a bound: the take a request arriving
// at the slot would make, recorded at the slot (Outcome.At). Only the
// buckets book; until the slot their debt is above Full, which reads, as
// for a clock stepped back, as an admission recorded after now, so takes
// wait behind bookings and bookings are served in order. A refund at the
// slot cancels a booking (see Book).
//
// # Common contract
//
// A cost >= 1 consumes when admitted; a denied request consumes nothing; cost
// 0 peeks (reports whether cost 1 would pass) and changes nothing. A cost above
// the capacity is denied with RetryAfter core.RetryNever and changes nothing.
// Remaining is whole events usable now; RetryAfter is the exact wait until
// this cost would be admitted; ResetAfter is the time until the key equals a
// fresh key (so its stored state can expire then). Both are whole µs, rounded
// up, so a retry at exactly now+RetryAfter passes.
//
// # Token bucket, leaky bucket, GCRA
//
// These three are one meter, described three ways, and admit exactly the same
// requests for the same Limit:
//   - token bucket: a bucket holds up to Burst tokens, starts full, and refills
//     continuously at Rate per Period; a request takes cost tokens.
//   - leaky bucket (as a meter): a bucket of capacity Burst drains
//     continuously at Rate per Period; a request pours in cost units and is
//     admitted if it does not overflow.
//   - GCRA: each event advances a theoretical arrival time (TAT) by the
//     emission interval T; a request is admitted if its new TAT is no more
//     than Burst×T ahead of now.
//
// Burst is the capacity: a fresh key admits exactly Burst requests at once
// (throttled and redis-cell admit Burst+1; sluice does not). All three store
// the TAT, the instant at which the bucket is full again (token view) or empty
// (leaky view). Remaining = floor(tokens after this request); RetryAfter =
// time until cost tokens are available; ResetAfter = time until the bucket is
// full. They differ only in name; they are kept as three Algorithms so that a
// configuration says what its author means.
//
// # Fixed window
//
// Windows are aligned on multiples of Period since the Unix epoch, so every
// instance and every key agree on where a window starts. At most Rate events
// are admitted per aligned window (so up to 2×Rate across a boundary).
// Remaining = Rate - count, or 0 when a Rate lowered since is below the
// count; RetryAfter = until the window ends; ResetAfter =
// until the window ends (zero for an unused key).
//
// # Sliding window log
//
// Exact: an event is admitted if fewer than Rate events (counting cost) were
// admitted in the last Period, the half-open interval (now-Period, now]. The
// log keeps one entry per distinct admission instant, so memory is O(Rate) per
// key (Rate is capped at core.MaxLogRate; prefer the counter for large limits).
// RetryAfter = until enough of the oldest entries leave the window;
// ResetAfter = until the newest entry leaves it.
//
// # Sliding window counter
//
// Cloudflare's estimate: with p events in the previous aligned window, c in the
// current one and a fraction f of the current window elapsed, the rate is
// p×(1-f) + c, and a request is admitted if rate + cost <= Rate. Computed in
// integers as p×(Period-e) + (c+cost)×Period <= Rate×Period. Remaining =
// floor(Rate - rate); RetryAfter = the exact instant the weighted estimate
// lets this cost through (possibly in the next window); ResetAfter = until the
// current window stops counting (the end of the next window).
package algo
