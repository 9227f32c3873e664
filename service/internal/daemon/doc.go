// Package daemon is `ratelimitd serve` as a value: the store (memory, or
// Redis behind the guard), the rules source and the engine following it,
// the gRPC and HTTP servers with every front door (the native API, Envoy's
// protocol, the HTTP check API, the store API, the admin API and page),
// health, metrics, and their lifecycle from start to drain and stop.
//
// The command builds a Daemon from its flags (Config.RegisterFlags) and
// runs it until a signal; tests and the demos embed one in process, on
// ports the kernel picks (--grpc-addr and --http-addr 127.0.0.1:0, then
// GRPCAddr and HTTPAddr say where it listens).
//
// The package is internal to the service's module: what ratelimitd
// promises is its flags and its protocols, not a Go API. A program that
// wants the limiter in its own process embeds core.Limiter; one that wants
// to share a running service's state uses remotestore.
package daemon
