// Package remotestore lets a sluice limiter use ratelimitd as its store: a
// core.Store whose every decision is made over gRPC by the service's own
// store (memory or Redis), and the server side of that API
// (sluice.ratelimit.v1.StoreService, see proto/sluice/ratelimit/v1/store.proto).
//
// A middleware app (net/http, Gin, Echo, Fiber, gRPC) keeps its policies,
// key functions and headers, and swaps its store for one line:
//
//	conn, _ := grpc.NewClient("ratelimitd:8081", append(remotestore.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
//	store := remotestore.New(conn)
//
// DialOptions reconnects within a second of the server's return and finds
// a dead connection by keepalive pings (see it for why gRPC's defaults do
// not suit a store). The store is usually wrapped in a guard (package
// core/guard) for a timeout, a circuit breaker and a failure mode (fail
// open, fail closed, or a local fallback limiter) when the service cannot be
// reached:
//
//	gs, _ := guard.New(remotestore.New(conn), guard.WithTimeout(20*time.Millisecond), guard.WithFailOpen())
//	lim, _ := core.NewLimiter(gs, policies)
//
// Every method is one RPC on the one connection, whose HTTP/2 streams
// multiplex all concurrent calls; a Take of several ops (a request that
// several policies apply to) is one RPC, decided all or nothing by the
// server's store. Concurrent Takes beyond a few in flight are coalesced
// into one TakeBatch RPC, each still decided on its own (see WithBatching):
// under load, one RPC carries many decisions.
//
// A ratelimitd serving a rules database (--db) asks the store API's
// callers for a write token by default (--grpc-auth=admin). WithToken
// sends one with every RPC over a TLS connection; over plaintext the call
// fails on the client and the token is never sent. WithInsecureToken
// sends it over plaintext too, for a loopback or trusted private link:
//
//	store := remotestore.New(conn, remotestore.WithToken(os.Getenv("RATELIMITD_TOKEN")))
//
// The server side is NewServer(store).Register(grpcServer): ratelimitd
// registers it on its gRPC port next to its native API, deciding on its
// own store, with ServerOptions on the gRPC server. The server decides
// every key in a namespace of its own (ServerKey: the policy behind
// PolicyPrefix), so the store API's keys never share state with the other
// users of that store (ratelimitd's rule counters, its admin limits, its
// idempotency records, the overrides it applies): app instances share
// their counters with one another, not with ratelimitd's rules. Reset,
// SetOverride and ClearOverride are admin changes, each run through the
// server's Recorder (WithRecorder): ratelimitd counts them against the
// token's admin writes and audits each one, and refuses one it cannot
// audit.
//
// Errors keep their meaning across the wire: an invalid argument (an
// invalid limit, an empty identity, a negative cost, a booking among
// several ops, two ops of one key) comes back as an error wrapping the same
// sentinel of package core (core.ErrInvalidLimit, core.ErrNoKey,
// core.ErrInvalidCost) with the server's text naming the op and the field,
// so the guard passes it to the caller as it would a local one. A failure
// of the server's store arrives as a generic UNAVAILABLE (the server logs
// its cause, it never sends it); an unreachable or slow server as the gRPC
// error or a context.DeadlineExceeded: the guard answers those by its mode.
package remotestore
