// Package attack holds sluice's attack suite: tests that replay the ways a
// hostile client could get past a limit against every adapter
// (net/http, Gin, Echo, Fiber, gRPC), each on the memory store and on a real
// Redis started by internal/redistest, and assert that a handler never runs
// more often than the limit allows.
//
// Every class is a table-driven test over the adapters and stores: an
// idempotency key reused on another request, a client that disconnects
// while its request is decided, a request missing one policy's key, path
// variants of a limited route, a panicking key function, request strings
// retained after the request (Fiber's buffers), spoofed forwarding headers,
// and a flood of new keys evicting a throttled one. Run it with `make
// attack` (verbose) or as part of `make test`.
//
// It is its own module, importing every adapter module, so that no adapter
// depends on another framework.
package attack
