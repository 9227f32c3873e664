// Package attack holds ratelimitd's adversarial tests: property tests that
// try hard to break the service's promises (never sharing a counter, never
// admitting more than a limit across front doors and instances, all or
// nothing, hostile input, reloads under load, retries after the advertised
// wait) over real gRPC and HTTP on loopback and real redis-server
// processes. It has no code of its own.
package attack
