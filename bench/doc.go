// Package bench compares sluice with other Go rate limiters: in memory
// (memory_test.go, package membench), as net/http and Fiber middleware
// (middleware_test.go, package mwbench) and on Redis, throughput and memory
// (redis_test.go, package redisbench, on a redis-server the benchmark starts
// itself). cmd/report runs them repeatedly and writes Markdown tables, the
// targets and an SVG chart (docs/benchmarks.md via make bench); see
// README.md.
package bench
