package remotestore

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

// Keepalive is the interval of the HTTP/2 pings DialOptions sends on an
// idle connection, and ServerOptions the shortest one the server accepts.
const (
	Keepalive        = 10 * time.Second
	keepaliveTimeout = 2 * time.Second
	keepaliveMin     = 5 * time.Second
)

// DialOptions returns the options of a connection to ratelimitd that suit
// a store behind a guard; add the transport credentials:
//
//	opts := append(remotestore.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))
//	conn, err := grpc.NewClient("ratelimitd:8081", opts...)
//
// The connection comes back within about a second of the server's return
// (gRPC's default reconnect backoff grows to two minutes, during which the
// guard's probes fail fast and its circuit stays open), and keepalive pings
// every Keepalive find a connection that died without closing (a host gone,
// a dropped route) within seconds instead of at the kernel's TCP timeout.
// The server must accept such pings: ratelimitd does (see ServerOptions).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: Keepalive, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
	}
}

// ServerOptions returns the options a gRPC server serving the store API
// needs for clients dialled with DialOptions: it accepts their keepalive
// pings (gRPC's default policy closes a connection pinged more often than
// every five minutes).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMin, PermitWithoutStream: true}),
	}
}

// DefaultStreamWorkers is how many long-lived goroutines ratelimitd's gRPC
// server serves calls on by default (grpc.NumStreamWorkers; its
// --grpc-stream-workers): more than the calls in flight of 64 callers
// waiting on Redis, so that a call runs on a stack grown before, where a
// goroutine of its own would grow one on every call.
const DefaultStreamWorkers = 128

// DefaultGCPercent is the garbage collector's target ratelimitd's server
// runs with by default (its --gc-percent; GOGC wins when set): a
// collection when the heap has grown by four times what the last one left
// live, where Go's default (100) collects at each doubling. ratelimitd's
// live heap is small (a few MiB on Redis), so at Go's default it collects
// about twenty times a second under load, and each collection costs every
// check CPU (the collector's workers, the assists it asks of the
// allocating handlers, and the handlers' stacks it shrinks, which grow
// again on the next call).
const DefaultGCPercent = 400
