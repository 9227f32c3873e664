// Package servicebench holds the rate-limit service benchmark of module
// github.com/sluicehq/sluice/bench, shared by its go test benchmarks and its
// report program (cmd/report): ratelimitd (built from the service module's
// cmd/ratelimitd) and envoyproxy/ratelimit (installed with go install into a
// cache directory) run as processes bound to loopback on one redis-server,
// both loading the same rules file in envoyproxy/ratelimit's format, and one
// load generator (go-control-plane's RateLimitService client, Callers
// concurrent callers, a closed loop) calls ShouldRateLimit on each with the
// same descriptors. A run measures checks per second, the latency of every
// call as its caller saw it, and the CPU time per check of the server process
// (utime+stime from /proc/PID/stat, to 10 ms) and of redis-server (INFO
// cpu, to the microsecond) over the measured interval.
package servicebench
