package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkPipelining measures what one decision costs with 1 and with 64
// concurrent callers (and with 64 that each spend 50 µs of CPU before a
// decision, as a server does on a check), on one redis-server and on a
// 3-master Cluster, with one pipeline in flight per node (the default), two,
// and without pipelining: besides ns/op (the inverse of the throughput) and p50-µs
// (one decision as its caller saw it), redis-µs/op and client-µs/op (CPU
// time, user and system, of every redis-server, INFO cpu, and of this
// process, getrusage, per decision), trips/op (the client's writes: go-redis
// commands and pipelines, per decision), and redis-sys/op and client-sys/op
// (read and write system calls per decision, /proc/PID/io, Linux only).
// CPU per decision is the figure that holds on a shared machine.
//
//	go test ./core/redisstore -run XXX -bench Pipelining -count 5
func BenchmarkPipelining(b *testing.B) {
	srv := redistest.StartServer(b)
	cluster := redistest.StartCluster(b, 3)
	modes := []struct {
		name string
		opts []redisstore.Option
	}{
		{"inflight=1", []redisstore.Option{redisstore.WithPipelining(1, 256)}},
		{"inflight=2", []redisstore.Option{redisstore.WithPipelining(2, 256)}},
		{"unpipelined", []redisstore.Option{redisstore.WithPipelining(0, 0)}},
	}
	for _, topo := range []string{"single", "cluster"} {
		for _, load := range []struct{ callers, work int }{{1, 0}, {64, 0}, {64, 50}} {
			callers := load.callers
			for _, m := range modes {
				b.Run(fmt.Sprintf("%s/callers=%d/work=%dµs/%s", topo, callers, load.work, m.name), func(b *testing.B) {
					var client redis.UniversalClient
					var servers []*redistest.Server
					trips := &tripCounter{}
					if topo == "single" {
						c := srv.Client(b, func(o *redis.Options) { o.PoolSize = callers + 16; o.ContextTimeoutEnabled = true })
						c.AddHook(trips)
						client, servers = c, []*redistest.Server{srv}
					} else {
						c := cluster.Client(b, func(o *redis.ClusterOptions) { o.PoolSize = callers + 16; o.ContextTimeoutEnabled = true })
						c.OnNewNode(func(n *redis.Client) { n.AddHook(trips) })
						client, servers = c, cluster.Nodes
					}
					s, err := redisstore.New(client, append(m.opts, redisstore.WithTimeout(5*time.Second))...)
					if err != nil {
						b.Fatal(err)
					}
					runPipelining(b, s, servers, trips, callers, time.Duration(load.work)*time.Microsecond)
				})
			}
		}
	}
}

// runPipelining takes b.N decisions from callers goroutines over 1000
// identities, each caller spending work of CPU before each decision (as a
// server does to receive and answer a check), and reports the figures of
// BenchmarkPipelining.
func runPipelining(b *testing.B, s *redisstore.Store, servers []*redistest.Server, trips *tripCounter, callers int, work time.Duration) {
	ctx := context.Background()
	l := core.PerSecond(1_000_000_000)
	for i := range 1000 { // warm up: the library loaded, the pool filled
		if _, err := takeID(ctx, s, "user:"+strconv.Itoa(i), l, 1); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([][]time.Duration, callers)
	var next atomic.Int64
	before := measureNow(b, servers, trips)
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				spin(work)
				start := time.Now()
				if _, err := takeID(ctx, s, "user:"+strconv.Itoa(int(i%1000)), l, 1); err != nil {
					b.Error(err)
					return
				}
				lat[g] = append(lat[g], time.Since(start))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	after := measureNow(b, servers, trips)
	all := slices.Concat(lat...)
	slices.Sort(all)
	n := float64(b.N)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2])/1e3, "p50-µs")
	}
	b.ReportMetric(float64(after.redisCPU-before.redisCPU)/1e3/n, "redis-µs/op")
	b.ReportMetric(float64(after.clientCPU-before.clientCPU)/1e3/n, "client-µs/op")
	b.ReportMetric(float64(after.trips-before.trips)/n, "trips/op")
	if after.redisSys > 0 {
		b.ReportMetric(float64(after.redisSys-before.redisSys)/n, "redis-sys/op")
		b.ReportMetric(float64(after.clientSys-before.clientSys)/n, "client-sys/op")
	}
}

// measures are the counters runPipelining reads before and after.
type measures struct {
	redisCPU, clientCPU time.Duration
	trips               int64
	redisSys, clientSys int64 // read and write system calls; 0: unknown
}

func measureNow(b *testing.B, servers []*redistest.Server, trips *tripCounter) measures {
	var m measures
	for _, srv := range servers {
		m.redisCPU += serverCPU(b, srv)
		m.redisSys += syscalls(srv.Pid())
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	m.clientCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	m.clientSys = syscalls(os.Getpid())
	m.trips = trips.n.Load()
	return m
}

// serverCPU returns used_cpu_sys + used_cpu_user of srv (INFO cpu).
func serverCPU(b *testing.B, srv *redistest.Server) time.Duration {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// syscalls returns the read and write system calls process pid made
// (/proc/PID/io's syscr + syscw), or 0 where that is not known.
func syscalls(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		if k == "syscr" || k == "syscw" {
			x, _ := strconv.ParseInt(v, 10, 64)
			n += x
		}
	}
	return n
}

// tripCounter is a go-redis hook counting round trips: a command sent
// alone, or a pipeline.
type tripCounter struct{ n atomic.Int64 }

func (t *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t.n.Add(1)
		return next(ctx, cmd)
	}
}

func (t *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t.n.Add(1)
		return next(ctx, cmds)
	}
}

// spin spends d of CPU time on this goroutine.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
