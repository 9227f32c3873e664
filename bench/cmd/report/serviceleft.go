package main

import (
	"fmt"
	"io"
)

// serviceLeft explains what is left of ratelimitd's CPU against the floor
// and envoyproxy/ratelimit, and why the service targets that a run does
// not meet are not met: what the code costs that a profile of 100 Hz
// cannot resolve, measured apart (instruction counts under valgrind's
// callgrind, which a shared machine's load does not move, allocation
// counts, system calls read from /proc), with the commands that measure
// them again. It describes the code, not one run: its figures are the
// ones measured when the hot path was last cut.
var serviceLeft = []string{
	"#### Why what is left is left",

	"The profile above samples 10 ms at a time, too coarse to tell a few µs apart, so the parts of a check were also measured apart, in instructions (valgrind's callgrind, which the load of a shared machine does not move: `GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind` over a `go test -c` binary at `-test.cpu 1`, two runs of N₁ and N₂ calls, the difference ÷ (N₂ − N₁)), in allocations (the `-benchmem` benchmarks and the `AllocsPerRun` tests named below) and in system calls (`/proc/PID/io` and the threads' context switches over 10 s of the load).",

	"- **A check in process.** ShouldRateLimit of one descriptor on Redis through the guard, without gRPC (`engine.BenchmarkDescriptorsGuardedRedis`'s call, 32 callers): 22.4k instructions and 9 allocations, of which ratelimitd's own code (engine, rules, core, guard, the Redis store, the pipeline batcher) about 5k; go-redis with bufio and strconv about 7k (each decision in a decideMany call writes six arguments, its three keys among them, and reads eight integers back); the Go runtime about 9k: the handler parks while its pipeline is out and is woken when it returns (about 4.7k), allocation and the garbage collector the rest. The same call on the memory store is 9.9k. What was cut to get there: the guard's timer context of every backend call (guard.Bounded: 28.5k to 24.4k, 17 to 12 allocations), the boxing of the keys in interfaces (to 23.3k, 9 allocations), strings.ContainsAny on every key (22.8k), the select over a context that never ends in the batcher (22.4k). The front door's part: a ShouldRateLimit allocates 6 objects beyond protobuf's decoding of its request (`envoyrls.TestShouldRateLimitAllocations`: the counter's identity, the statuses, the decision's results, the text of the header fields, one block for the descriptors, the response and its messages), where the floor's gRPC alone makes about 56 per call (HTTP/2 headers, contexts, buffers: an allocation profile of the floor under this load).",

	"- **Against the floor.** Over 10 s of the closed loop (`/proc/PID/io`), the floor made 0.17 reads and 0.11 writes per check at 7.9k checks/s; ratelimitd on Redis 0.38 and 0.30 at 3.6k checks/s, and 0.56 voluntary context switches per check against 0.33. The Redis round trip itself is a write and one or two reads per pipeline of about 18 checks, and a park and a wake per check; the rest is gRPC at half the throughput: the load generator, redis-server and the server share 2 CPUs, so a server that spends more per check gets fewer checks per second, and each read of gRPC's reader and each write of its writer carries fewer calls (a response is written when its pipeline returns, not with the others of its read). The ratio to the floor is therefore partly the machine's: the floor's own cost per check falls as its throughput rises, and no server that talks to a Redis on the same 2 CPUs reaches the floor's throughput. On memory, where the decision costs no round trip, ratelimitd's CPU per check is about 1.2× to 1.5× the floor's.",

	"- **Redis CPU.** One decision of the bench's fixed window in a decideMany call of 64 costs redis-server about 46.8k instructions (callgrind of redis-server, `core/redisstore` BenchmarkRedisCost's many64 shape with the service's keys; 50.2k before decideMany wrote each op's reply straight into its own, not into a table of its own copied after), and four redis.call()s (GET of the override key, GET and PEXPIRETIME of the state, INCRBY); envoyproxy/ratelimit's INCRBY and EXPIRE cost 11.7k per descriptor. It pays instead a round trip per request (a read, a write and a turn of the event loop for one or two commands), ratelimitd one per pipeline of many checks, which is why the ratio in the service is about 1.0× to 1.15×, not 4×. The calls are not what is left: callgrind's profile of redis-server puts a redis.call() at about 2.3k instructions, and the Lua interpreter running the script's own code (its functions, tables, number conversions) at about half of a decision. Two ways of making fewer calls were built and measured, and cost more, so they were not kept: the window's end kept in the value (one GET and one SET … KEEPTTL a decision, no PEXPIRETIME: 53.3k, for parsing and formatting a 16-digit instant and a SET that rewrites what INCRBY adds to in place), and an override bit in the state's sign, set by SetOverride, that spares reading the override key (47.8k in a decideMany, and 78k instead of 71k for one decide1: the bit's bookkeeping in Lua costs more than a GET of a missing key); both changed the key layout too, so a rolling upgrade would have counted on two sets of keys. Meeting 1.0× needs less Lua per decision (fewer function calls and tables on the decideMany path), or a cheaper round trip to Redis per check.",

	"- **Batches.** A CheckRateLimitBatch of 100 on Redis is one round of one check per caller, decided in one CheckGroups call: one decideMany FCALL for the batch (`engine.TestBatchRoundTrips`) where it was one call per check on 16 goroutines; in process 18.3k instructions per decision instead of 26.5k, the runtime's scheduling of per-check goroutines gone. What is left per decision is go-redis's writing and parsing (about 6k), allocation and the collector (about 5k: each check's Result holds a whole core.Decision) and protobuf. On memory a batch decision is 14k instructions in process (gRPC's transport aside), 28% of them protobuf's decoding and encoding of its check (4 allocations each, which protobuf forces), 30% allocation and the collector. On a loaded host, `runtime.asyncPreempt` takes a large share of the batch profiles (up to a fifth): the runtime preempts a handler that has run 10 ms of wall time, which it reaches when the host takes the CPU away in the middle of a batch.",

	"- **p99 under 5 ms.** The open-loop latencies above are the machine's: on a loaded host the bare floor's own p99 is tens of milliseconds at 3000 calls/s, so the target is read on a quiet machine only.",
}

// writeLeft writes serviceLeft.
func writeLeft(w io.Writer) {
	for _, p := range serviceLeft {
		fmt.Fprintf(w, "\n%s\n", p)
	}
}
