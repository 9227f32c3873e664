// Package ratelimitv1 holds the Go code generated from
// proto/sluice/ratelimit/v1: the messages and the client and server of
// ratelimitd's native gRPC API (sluice.ratelimit.v1.RateLimitService) and of
// its store API. Regenerate it with `make proto` from the repository root;
// `make proto-check` fails when it is not current. Do not edit the .pb.go
// files.
package ratelimitv1
