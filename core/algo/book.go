package algo

import "github.com/sluicehq/sluice/internal/exact"

// Book decides a booking of cost units at instant now: the cost is
// admitted, and counted, at its slot, the earliest whole µs s >= now at which
// Step would admit it, provided s - now <= maxDelay µs; otherwise Book is a
// denied Step (nothing consumed; Retry is the wait until a Step of the cost
// would pass). An admitted booking's Outcome has At = s and Retry = the
// wait s - now (in units; Spec.Result turns it into RetryAfter); a slot at
// now (Retry zero) is an ordinary admission.
//
// Only the buckets book (TokenBucket, LeakyBucket, GCRA): their state is
// one instant, the TAT, so a booking is the take a request arriving at s
// would make (the TAT becomes max(TAT, s×Q) + cost×T), and the bucket is left
// more than full (debt above Full) until s. That is the state a key has
// when the clock stepped back behind its last admission, and it is read the
// same way: the latest admission is recorded after now (see the package
// doc, "Clock steps"). A Step before s is denied, a later Book is booked
// behind s (bookings are served in the order they were made), and Refund
// of the booking (Outcome.At = s) gives it back whole while nothing was
// booked behind it, less what was, never more than it holds. The promise
// of the bucket holds on the recorded instants. The windows count whole
// windows and cannot record a slot: for them Book is Step (a caller asks
// Algorithm.Bucket first).
//
// maxDelay is clamped to [0, MaxDelay()]. Cost 0 peeks: it reports whether
// a booking of one unit would be admitted, and its slot, and changes
// nothing. Book is as pure as Step.
func (sp *Spec) Book(st *State, o *Outcome, now, cost, maxDelay int64) {
	if !sp.Algorithm.Bucket() {
		sp.Step(st, o, now, cost)
		return
	}
	if cost == 0 {
		peek := *st
		st = &peek
	}
	sp.bucket(st, o, now, cost, max(min(maxDelay, sp.MaxDelay()), 0))
}

// MaxDelay returns the longest booking of a bucket, in µs: the debt of a
// bucket booked that far ahead, Full + MaxDelay×Q units, stays an exact
// integer in a float64 (the Lua number). It is zero for the windows, which
// do not book. For a limit of 10 per second it is about 285 years.
func (sp *Spec) MaxDelay() int64 {
	if !sp.Algorithm.Bucket() {
		return 0
	}
	return max((exact.Max-sp.Full)/sp.Q-1, 0)
}
