// Package middleware is the one middleware flow every sluice adapter runs,
// and what the adapters share beyond field formatting.
//
// Flow runs the sequence once for net/http, Gin, Echo, Fiber and gRPC's
// server interceptors, a unary call and a stream as it opens alike (the
// messages of a stream and the client interceptors decide one message or
// call each, with no handler to run after): skip,
// cost, decide, a client gone or an undecided request (the error handler,
// or log and continue), no policy applied, the merge with an earlier sluice
// middleware's Decision (Merge: stacked middlewares), headers, the
// Decision stored, the denial, the rest of the chain, and the refund after
// the response with its status. An adapter maps its framework onto it with
// a Framework (its request value, its per-request state, how the chain
// goes on, where headers and the Decision go) and its options set a Config;
// Run is generic over those types, so the flow costs no allocation of its
// own.
//
// Beside the flow: a rate-limited logger for undecided requests and failed
// refunds, recovery of the application's callbacks, the path helpers that
// let a request view report the path as a router matched it, the
// framework-IP grouping and key functions over a framework's request, and
// the problem+json body of a denial. It is internal to sluice's adapters;
// the nested adapter modules reach it through their replace directive.
package middleware
