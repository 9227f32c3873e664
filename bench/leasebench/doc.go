// Package leasebench measures sluice's lease layer (package core/lease)
// against the exact path it replaces, for the report program (cmd/report)
// and its tests:
//
//   - HotKey: one hot identity decided by four processes on one
//     redis-server, exact (every decision a Redis call) and leased: Redis
//     calls per decision, Redis CPU per decision, decisions per second
//     across the fleet;
//   - Latency: a leased decision's latency next to the memory store's;
//   - Global: a fleet-wide limit (one identity for everyone), several
//     instances on one Redis: what the fleet admits per second next to the
//     limit, and the share of decisions Redis serves;
//   - Pareto: many identities of Pareto-distributed rates, for each
//     algorithm a lease takes: store calls per decision and the admissions
//     lost next to the exact path on the same requests;
//   - Outage: Redis killed under a guarded fleet: the decisions that went
//     on from the blocks held.
//
// The processes of HotKey are this program run again: call MaybeChild
// first thing in main (or TestMain).
package leasebench
