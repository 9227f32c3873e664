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

	"- **A check in process.** ShouldRateLimit of one descriptor on Redis through the guard, without gRPC (`engine.BenchmarkDescriptorsGuardedRedis`'s call, 32 callers): 22.4k instructions and 9 allocations when last measured whole, of which ratelimitd's own code (engine, rules, core, guard, the Redis store, the pipeline batcher) about 5k; go-redis with bufio and strconv about 7k; the Go runtime about 9k: the handler parks while its pipeline is out and is woken when it returns (about 4.7k), allocation and the garbage collector the rest. The same call on the memory store is 9.9k. Cut since: the client's part of a decision in a decideMany (two keys an op, the limit and cost once per call when its ops share them, a reply of five short integers instead of eight: a TakeEach of 64 costs the client 7.8k instructions per decision instead of 10.6k, `core/redisstore` BenchmarkTakeEach64, 78 allocations for 64 decisions, `TestTakeEachAllocations`), a fresh goroutine per pipeline whose stack grew again through go-redis (a sender per slot, parked between pipelines: 12.8k to 12.2k per decision at 64 callers), and the garbage collector's target: ratelimitd collects at 400 (`--gc-percent`; GOGC wins when set), not Go's 100, at which its few-MiB heap was collected about twenty times a second; under callgrind the whole server process went from 131k–147k to 97k–98k instructions per ShouldRateLimit, the floor (at Go's default then) 84k–86k. The floor now runs at ratelimitd's target too (`remotestore.DefaultGCPercent`), so the ratio above does not credit ratelimitd with the collector's work on gRPC's garbage. The front door's part: a ShouldRateLimit allocates 6 objects beyond protobuf's decoding of its request (`envoyrls.TestShouldRateLimitAllocations`), where the floor's gRPC alone makes about 56 per call (HTTP/2 headers, contexts, buffers).",

	"- **Against the floor.** At 64 callers in a closed loop a pipeline carries 13–15 checks (the batcher's Stats), at 3000 calls/s open loop about 1.2. Over 10 s of the closed loop (`/proc/PID/io`) ratelimitd on Redis made 0.58 reads and 0.42 writes per check, of which the Redis round trip is only 0.1–0.15 (a write and one or two reads per pipeline); the rest is gRPC at a lower throughput than the floor's: the load generator, redis-server and the server share 2 CPUs, so a server that spends more per check gets fewer checks per second, and each read of gRPC's reader and each write of its writer carries fewer calls (a response is written when its pipeline returns, not with the others of its read). The ratio to the floor is therefore partly the machine's: the floor's own cost per check falls as its throughput rises, and no server that talks to a Redis on the same 2 CPUs reaches the floor's throughput. What is left in process beyond the Redis client is the park and wake of each handler while its pipeline is out (the Go runtime's) and about 2% of the server's CPU in the collector shrinking the stream workers' stacks, which grow again (only `GODEBUG=gcshrinkstackoff=1` stops it). `grpc.SharedWriteBuffer` was measured and changed nothing; any transport option would go into the floor too.",

	"- **Redis CPU.** One decision of the bench's fixed window in a decideMany call of 64 costs redis-server about 30.8k instructions (callgrind of redis-server, `core/redisstore` BenchmarkRedisCost's many64 shape with the service's keys, `SLUICE_REDIS_CALLGRIND=1`; 46.5k before the changes in [redis.md, What a decision costs Redis](redis.md#what-a-decision-costs-redis): two keys an op instead of six arguments, a reply of five integers instead of eight, one protected call for all the ops, the step functions in line; the key layout and values unchanged), and four redis.call()s (GET of the override key, GET and PEXPIRETIME of the state, INCRBY) at about 3.7k each; envoyproxy/ratelimit's INCRBY and EXPIRE cost 11.5k per descriptor. It pays instead a round trip per request (a read, a write and a turn of the event loop for one or two commands), ratelimitd one per pipeline of many checks. What is left is the calls and the interpreter (about 6.7k per op): the three ways of making fewer calls that were tried cost more (see redis.md).",

	"- **Batches.** A CheckRateLimitBatch of 100 is decided by `engine.CheckBatchFunc`, which hands each check's answer to the handler in pooled memory (the decisions' results, the rounds' arrays, the Result, the observers' Event) and matches the rules once per run of checks of one dimension and endpoint; the handler writes its response messages straight from it, in one allocation. On Redis it is one round of one check per caller, decided in one CheckGroups call: one decideMany FCALL for the batch (`engine.TestBatchRoundTrips`). In process (callgrind), the handler on memory costs 10.2k instructions per decision, protobuf's decoding and encoding included (13.7k before), the engine's part 2.4k (6.6k); past protobuf's decoding of its request a batch of 100 allocates 4 objects (`grpcapi.TestBatchAllocations`; the engine's `TestCheckBatchFuncAllocations`: 1 in order, at most 8 all or nothing), 52 KB where it was 133 KB; on Redis 531 objects and 66 KB (553 and 183 KB). Protobuf is now the largest part, 46% of the handler on memory (about 4.2k instructions a decision: encoding walks each result's oneof by reflection); what is left on Redis is go-redis and the store's reading and writing, and the scheduler. On a loaded host, `runtime.asyncPreempt` takes a large share of the batch profiles: the runtime preempts a handler that has run 10 ms of wall time, which it reaches when the host takes the CPU away in the middle of a batch.",

	"- **p99 under 5 ms.** The open-loop latencies above are the machine's: at 3000 calls/s the bare floor's own p99 on this 2-CPU machine is about 5 ms quiet and tens of milliseconds loaded, so the target is read on a quiet machine only, and against the floor's p99 of the same run.",
}

// writeLeft writes serviceLeft.
func writeLeft(w io.Writer) {
	for _, p := range serviceLeft {
		fmt.Fprintf(w, "\n%s\n", p)
	}
}
