// Package traffic counts ratelimitd's decisions in memory for the admin
// page: for the whole instance and for each rule, the checks allowed,
// warned, shadow-denied and denied per second over the last minute and per
// minute over the last hour, and the callers throttled now and most
// throttled in the last hour. Where instances share Redis, each publishes
// its per-minute counts there (Fleet) and the page sums them.
//
// The decision path pays only for atomic increments of running totals:
// one per rule that applied and one for the instance (Recorder.Decided).
// A sampler (Recorder.Tick, once a second, off the decision path) moves
// what the totals gained since its last tick into the rings of seconds and
// minutes. A count thus belongs to the second in which the sampler saw it
// (the middle of the span between two ticks), within a tick's lag. A
// denied or shadow-denied check also updates the bounded table of
// throttled callers, under a lock, as the engine's Recent list does; an
// allowed or warned one does not.
package traffic
