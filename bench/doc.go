// Package bench compares sluice with other Go rate limiters: in memory
// (memory_test.go, package membench), as net/http middleware
// (middleware_test.go, package mwbench) and on Redis (redis_test.go, package
// redisbench, on a redis-server the benchmark starts itself). cmd/report runs
// them repeatedly and prints Markdown tables; see README.md.
package bench
