package lease_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) {
	if task, i, ok := redistest.Child(); ok {
		if err := child(task, i); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// run is what a process of the fleet is told: its store, the keys and
// their limit, how long, how many goroutines, and where to write what it
// admitted. It travels in the environment, as one JSON-free line.
type run struct {
	addrs       []string
	cluster     bool
	guarded     bool // a guard (fail closed) under the lease layer
	keys        []string
	limit       core.Limit // the hot key's
	other       core.Limit // the other keys', when not the zero Limit
	hold        time.Duration
	duration    time.Duration
	workerCount int
	refunds     bool
	out         string // a directory: each process writes out/<index>
}

const runEnv = "SLUICE_LEASE_RUN"

func (r run) env() string {
	return fmt.Sprintf("%s=%s;%t;%t;%s;%d;%d;%d;%d;%d;%d;%d;%t;%s;%d;%d;%d;%d", runEnv, strings.Join(r.addrs, ","), r.cluster, r.guarded,
		strings.Join(r.keys, ","), r.limit.Algorithm, r.limit.Rate, r.limit.Period, r.limit.Burst, r.hold, r.duration, r.workerCount, r.refunds, r.out,
		r.other.Algorithm, r.other.Rate, r.other.Period, r.other.Burst)
}

func parseRun(s string) (run, error) {
	f := strings.Split(s, ";")
	if len(f) != 17 {
		return run{}, fmt.Errorf("%s: %d fields", runEnv, len(f))
	}
	var r run
	var n [11]int64
	for i, j := range []int{4, 5, 6, 7, 8, 9, 10, 13, 14, 15, 16} {
		v, err := strconv.ParseInt(f[j], 10, 64)
		if err != nil {
			return run{}, fmt.Errorf("%s: field %d: %w", runEnv, j, err)
		}
		n[i] = v
	}
	r.addrs, r.cluster, r.guarded, r.keys = strings.Split(f[0], ","), f[1] == "true", f[2] == "true", strings.Split(f[3], ",")
	r.limit = core.Limit{Algorithm: core.Algorithm(n[0]), Rate: n[1], Period: time.Duration(n[2]), Burst: n[3]}
	r.other = core.Limit{Algorithm: core.Algorithm(n[7]), Rate: n[8], Period: time.Duration(n[9]), Burst: n[10]}
	r.hold, r.duration, r.workerCount = time.Duration(n[4]), time.Duration(n[5]), int(n[6])
	r.refunds, r.out = f[11] == "true", f[12]
	return r, nil
}

// limitOf is key k's limit.
func (r run) limitOf(k int) core.Limit {
	if k > 0 && r.other != (core.Limit{}) {
		return r.other
	}
	return r.limit
}

// child runs a task of a process started by startFleet.
func child(task string, i int) error {
	if task != "fleet" {
		return fmt.Errorf("unknown task %q", task)
	}
	r, err := parseRun(os.Getenv(runEnv))
	if err != nil {
		return err
	}
	ls, closeStore, err := r.store()
	if err != nil {
		return err
	}
	defer closeStore()
	f, err := os.Create(filepath.Join(r.out, strconv.Itoa(i)))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := r.workers(ls, &eventWriter{f: f}, i, r.stopped()); err != nil {
		return err
	}
	if err := ls.Close(); err != nil {
		return err
	}
	st := ls.Stats()
	fmt.Printf("%d %d %d %d\n", st.Takes, st.Local, st.CachedDenials, st.PassedThrough)
	return nil
}

// store returns the lease layer of a process of r, over the Redis store
// (and a guard, when r says so), and what closes them.
func (r run) store() (*lease.Store, func(), error) {
	var client redis.UniversalClient
	// No retries: a dead server is an error at once, for the guard.
	if r.cluster {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.addrs, MaxRetries: -1})
	} else {
		client = redis.NewClient(&redis.Options{Addr: r.addrs[0], MaxRetries: -1})
	}
	closers := []func(){func() { _ = client.Close() }}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	// Generous timeouts: four processes under -race on a loaded 2-core
	// machine can queue a call for long.
	rs, err := redisstore.New(client, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	var store core.Store = rs
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if r.guarded {
		g, err := guard.New(rs, guard.WithFailClosed(50*time.Millisecond), guard.WithTimeout(300*time.Millisecond),
			guard.WithBreaker(guard.Breaker{Failures: 2, Cooldown: 100 * time.Millisecond}), guard.WithLogger(quiet))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers, store = append(closers, func() { _ = g.Close() }), g
	}
	ls, err := lease.New(store, lease.WithLogger(quiet))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return ls, closeAll, nil
}

// stopped returns a channel closed when the test asks the fleet to stop
// (the file out/stop), or when r's duration has passed.
func (r run) stopped() <-chan struct{} {
	deadline := time.Now().Add(r.duration)
	stop := make(chan struct{})
	go func() {
		for time.Now().Before(deadline) {
			if _, err := os.Stat(filepath.Join(r.out, "stop")); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(stop)
	}()
	return stop
}

// workers runs r's goroutines of process i until stop, and returns the
// first error.
func (r run) workers(ls *lease.Store, w *eventWriter, i int, stop <-chan struct{}) error {
	var wg sync.WaitGroup
	errs := make(chan error, r.workerCount)
	for k := range r.workerCount {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.work(ls, w, rand.New(rand.NewPCG(uint64(i), uint64(k))), k, stop)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// eventWriter writes each admission as it is made, straight to the file
// (no buffer a kill -9 would lose): "a key at cost", "r key at cost"
// once an admission was given back, and "f key 0 0" when a goroutine's
// answers for key turn to the failure mode's (the store down, no block
// left).
type eventWriter struct {
	mu sync.Mutex
	f  *os.File
}

func (w *eventWriter) write(kind byte, key int, at, cost int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := fmt.Fprintf(w.f, "%c %d %d %d\n", kind, key, at, cost)
	return err
}

// work decides until stop is closed: the first key most of the time (the
// hot one), costs of 1 to 3, and, with refunds, every eighth admission of
// a window given back. With r.other set, goroutine worker decides one key,
// its index modulo the keys (so that a store call of one key never holds
// up another's decisions), and the admissions of the keys under r.other (a
// limit never reached: nothing to check them against) are written as
// counts, "n key at count", one per 5 ms of instants, at the instant of
// the last.
func (r run) work(ls *lease.Store, w *eventWriter, rng *rand.Rand, worker int, stop <-chan struct{}) error {
	ctx := context.Background()
	var out [1]core.Result
	c := &counts{w: w}
	defer c.flush()
	failing := make([]bool, len(r.keys)) // by key: the last answer was the failure mode's
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		k := 0
		switch {
		case r.other != (core.Limit{}):
			k = worker % len(r.keys)
		case len(r.keys) > 1 && rng.IntN(10) < 3:
			k = 1 + rng.IntN(len(r.keys)-1)
		}
		cost := int64(1)
		if rng.IntN(10) == 0 {
			cost = 2 + rng.Int64N(2)
		}
		op := core.Op{Key: core.Key{Identity: r.keys[k], Policy: "p"}, Limit: r.limitOf(k), Cost: cost, Lease: r.hold}
		if err := ls.Take(ctx, []core.Op{op}, out[:]); err != nil {
			return err
		}
		res := out[0]
		if res.Source.Degraded() != failing[k] {
			failing[k] = res.Source.Degraded()
			if failing[k] {
				if err := w.write('f', k, 0, 0); err != nil {
					return err
				}
			}
		}
		if !res.Allowed || res.Source.Degraded() {
			continue
		}
		if k > 0 && r.other != (core.Limit{}) {
			if err := c.add(k, res.At, cost); err != nil {
				return err
			}
			continue
		}
		if err := w.write('a', k, res.At, cost); err != nil {
			return err
		}
		if r.refunds && !op.Limit.Algorithm.Bucket() && rng.IntN(8) == 0 {
			if err := ls.Refund(ctx, core.Admission{Key: op.Key, Limit: op.Limit, Cost: cost, At: res.At, Lease: r.hold}); err != nil {
				return err
			}
			if err := w.write('r', k, res.At, cost); err != nil {
				return err
			}
		}
	}
}

// stopFleet asks the processes of r to stop.
func stopFleet(t *testing.T, r run) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.out, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// counts are one goroutine's admissions of a counted key, per 5 ms of
// their instants.
type counts struct {
	w          *eventWriter
	key        int
	bucket, at int64
	n          int64
}

func (c *counts) add(key int, at, cost int64) error {
	var err error
	if b := at / 5000; b != c.bucket || key != c.key {
		err = c.flush()
		c.bucket, c.key = b, key
	}
	c.at, c.n = at, c.n+cost
	return err
}

func (c *counts) flush() error {
	if c.n == 0 {
		return nil
	}
	n := c.n
	c.n = 0
	return c.w.write('n', c.key, c.at, n)
}

// fleetProcs are the processes of a fleet.
type fleetProcs struct {
	cmds   []*exec.Cmd
	stdout []*bytes.Buffer
	stderr []*bytes.Buffer
	done   []chan error
}

// startFleet starts n processes of this test binary running r.
func startFleet(t *testing.T, n int, r run) *fleetProcs {
	t.Helper()
	p := &fleetProcs{}
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), r.env(), redistest.ChildEnv+"=fleet "+strconv.Itoa(i))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting process %d: %v", i, err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		p.cmds, p.stdout, p.stderr, p.done = append(p.cmds, cmd), append(p.stdout, &stdout), append(p.stderr, &stderr), append(p.done, done)
	}
	t.Cleanup(func() {
		for i, cmd := range p.cmds {
			_ = cmd.Process.Kill()
			<-p.done[i]
		}
	})
	return p
}

// kill ends process i with SIGKILL and waits for it.
func (p *fleetProcs) kill(t *testing.T, i int) {
	t.Helper()
	if err := p.cmds[i].Process.Kill(); err != nil {
		t.Fatalf("kill -9 of process %d: %v", i, err)
	}
	<-p.done[i]
	p.done[i] <- nil // for cleanup
}

// wait waits (at most timeout) for every process but those killed, which
// must succeed, and returns their Stats lines.
func (p *fleetProcs) wait(t *testing.T, timeout time.Duration, killed ...int) []string {
	t.Helper()
	var outs []string
	deadline := time.After(timeout)
	for i := range p.cmds {
		if contains(killed, i) {
			continue
		}
		select {
		case err := <-p.done[i]:
			p.done[i] <- err // for cleanup
			if err != nil {
				t.Fatalf("process %d: %v\n%s", i, err, p.stderr[i])
			}
			outs = append(outs, strings.TrimSpace(p.stdout[i].String()))
		case <-deadline:
			t.Fatalf("process %d did not end within %s", i, timeout)
		}
	}
	return outs
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// readEvents reads every process's admissions, per key.
func readEvents(t *testing.T, dir string, keys int) [][]event {
	t.Helper()
	per := make([][]event, keys)
	files, err := filepath.Glob(filepath.Join(dir, "[0-9]*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		refunded := map[[3]int64]int{} // (key, at, cost) → refunds not yet matched
		var adm [][2]int               // (key, index in per[key])
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kind byte
			var k int
			var at, cost int64
			if _, err := fmt.Sscanf(sc.Text(), "%c %d %d %d", &kind, &k, &at, &cost); err != nil {
				continue // a line cut by a kill -9
			}
			switch kind {
			case 'r':
				refunded[[3]int64{int64(k), at, cost}]++
				continue
			case 'n', 'f': // admissions counted, not checked; failure-mode answers
				continue
			}
			per[k] = append(per[k], event{at: at, cost: cost})
			adm = append(adm, [2]int{k, len(per[k]) - 1})
		}
		f.Close()
		for _, a := range adm {
			e := &per[a[0]][a[1]]
			if id := [3]int64{int64(a[0]), e.at, e.cost}; refunded[id] > 0 {
				refunded[id]--
				e.refunded = true
			}
		}
	}
	return per
}
