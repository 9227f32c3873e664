// Package servicebench holds the rate-limit service benchmark of module
// github.com/sluicehq/sluice/bench, shared by its go test benchmarks and its
// report program (cmd/report): ratelimitd (built from the service module's
// cmd/ratelimitd), envoyproxy/ratelimit (installed with go install into a
// cache directory; its default configuration and its best, EnvoyBestEnv)
// and the bare grpc-go floor (built from this module's cmd/grpcfloor:
// constant answers, ratelimitd's server options) run as processes bound to
// loopback on one redis-server. The ShouldRateLimit servers load the same
// rules file in envoyproxy/ratelimit's format; ratelimitd's own API
// (CheckRateLimit, CheckRateLimitBatch, the HTTP JSON check) runs under the
// same limit in sluice's format. One load generator drives them with
// Callers concurrent callers, in a closed loop (Run) or at a fixed offered
// rate (LoadOpen, RunConfig.Rate). A run measures checks per second, the
// latency of every call as its caller saw it, and the CPU time per check of
// the server process (utime+stime from /proc/PID/stat, to 10 ms), of
// redis-server (INFO cpu, to the microsecond) and of the load generator
// itself (getrusage of this process, to the microsecond) over the measured
// interval.
package servicebench
