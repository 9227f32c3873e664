package lease_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// fleetKeys returns n identities no other test uses: the first is the hot
// one.
func fleetKeys(t *testing.T, n int) []string {
	base := limitertest.Key(t).Identity
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", base, i)
	}
	return keys
}

// checkRun checks what every process of r admitted, key by key, and logs
// the processes' counters (store calls, decisions from blocks, repeated
// denials, ops passed through).
func checkRun(t *testing.T, r run, stats []string) {
	t.Helper()
	per := readEvents(t, r.out, len(r.keys))
	total := 0
	for k, events := range per {
		n := checkFleet(t, r.limitOf(k), events, false)
		if k == 0 && n == 0 {
			t.Fatalf("nothing admitted on the hot key")
		}
		total += n
	}
	var takes, local int64
	for _, s := range stats {
		var a, b, c, d int64
		if _, err := fmt.Sscanf(s, "%d %d %d %d", &a, &b, &c, &d); err != nil {
			t.Fatalf("process output %q: %v", s, err)
		}
		takes, local = takes+a, local+b
	}
	t.Logf("%s: %d admitted; surviving processes: %d store calls, %d decisions from blocks (%s)", r.limit, total, takes, local, strings.Join(stats, " | "))
}

// fleetLimits are a hot key's limits in the tests of several processes:
// far under what four processes offer, so that every one of them decides
// at and over the limit.
var fleetLimits = []core.Limit{
	core.Per(300, 50*time.Millisecond).WithAlgorithm(core.FixedWindow),
	core.Per(300, 50*time.Millisecond).WithAlgorithm(core.SlidingWindowCounter),
	core.Per(6, time.Millisecond).WithBurst(300),
	core.Per(6, time.Millisecond).WithBurst(300).WithAlgorithm(core.GCRA),
}

// Four processes, of four goroutines each, decide a hot key and three
// others on one Redis server (the sliding window counter, the token
// bucket) and on a 3-master Cluster (the fixed window, GCRA), leased, with
// costs of 1 to 3 and refunds: what they admitted together, replayed on
// Redis's clock, is what the algorithm admits.
func TestProcessesOnRedis(t *testing.T) {
	single := redistest.StartServer(t)
	cluster := redistest.StartCluster(t, 3)
	for _, c := range []struct {
		name    string
		addrs   []string
		cluster bool
		limits  []core.Limit
	}{{"single", []string{single.Addr}, false, fleetLimits[1:3]}, {"cluster", cluster.Addrs(), true, []core.Limit{fleetLimits[0], fleetLimits[3]}}} {
		t.Run(c.name, func(t *testing.T) {
			for _, l := range c.limits {
				t.Run(l.Algorithm.String(), func(t *testing.T) {
					r := run{addrs: c.addrs, cluster: c.cluster, keys: fleetKeys(t, 4), limit: l, hold: 20 * time.Millisecond,
						duration: 400 * time.Millisecond, workerCount: 4, refunds: true, out: t.TempDir()}
					p := startFleet(t, 4, r)
					checkRun(t, r, p.wait(t, time.Minute))
				})
			}
		})
	}
}

// A process holding blocks is killed with SIGKILL mid-run; the others go
// on: nothing any of them admitted, the killed one's included, is over
// the limit, and its parked units come back with their windows (logged:
// the units kept per window, before and after the kill).
func TestProcessKilledHoldingBlocks(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, l := range []core.Limit{fleetLimits[0], fleetLimits[2]} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			r := run{addrs: []string{srv.Addr}, keys: fleetKeys(t, 2), limit: l, hold: 40 * time.Millisecond,
				duration: time.Minute, workerCount: 4, out: t.TempDir()}
			p := startFleet(t, 4, r)
			waitForAdmissions(t, r.out, "0", 0, 50)
			p.kill(t, 0)
			killed := time.Now().UnixMicro()
			for i := 1; i < 4; i++ { // the others go on for a while
				waitForAdmissionsSince(t, r.out, strconv.Itoa(i), 0, killed+int64(200*time.Millisecond/time.Microsecond), 10)
			}
			stopFleet(t, r)
			checkRun(t, r, p.wait(t, time.Minute, 0))
		})
	}
}

// waitForAdmissionsSince waits (at most a minute) until process name has
// written n admissions of key k made after since (µs, Redis's clock).
func waitForAdmissionsSince(t *testing.T, dir, name string, k int, since int64, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		got := 0
		for _, line := range bytes.Split(b, []byte("\n")) {
			var kk int
			var at, cost int64
			if _, err := fmt.Sscanf(string(line), "a %d %d %d", &kk, &at, &cost); err == nil && kk == k && at > since {
				got++
			}
		}
		if got >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %s admitted fewer than %d of key %d since %d within a minute", name, n, k, since)
}

// countedBetween sums the admissions of key k every process counted (its
// "n" lines) with instants in (from, to).
func countedBetween(t *testing.T, dir string, k int, from, to int64) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "[0-9]*"))
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			var kk int
			var at, n int64
			if _, err := fmt.Sscanf(string(line), "n %d %d %d", &kk, &at, &n); err == nil && kk == k && at > from && at < to {
				total += n
			}
		}
	}
	return total
}

// waitForTraffic waits (at most a minute) until process name has been
// admitting key k for d, and still is: its first admission of k is d old,
// its last one fresh. It reads the head and the tail of its file only.
func waitForTraffic(t *testing.T, dir, name string, k int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		first, last := edgeAdmissions(filepath.Join(dir, name), k)
		if first > 0 && time.Since(time.UnixMicro(first)) >= d && time.Since(time.UnixMicro(last)) < 200*time.Millisecond {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %s did not admit key %d for %s, and still, within a minute", name, k, d)
}

// edgeAdmissions returns the instants of the first count of admissions of
// key k in the first 64 KiB of the file at path and of the last in its
// last 64 KiB (0 when none).
func edgeAdmissions(path string, k int) (first, last int64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	scan := func(b []byte, pick func(int64)) {
		for _, line := range bytes.Split(b, []byte("\n")) {
			var kk int
			var at, cost int64
			if _, err := fmt.Sscanf(string(line), "n %d %d %d", &kk, &at, &cost); err == nil && kk == k {
				pick(at)
			}
		}
	}
	buf := make([]byte, 64<<10)
	n, _ := f.ReadAt(buf, 0)
	scan(buf[:n], func(at int64) {
		if first == 0 {
			first = at
		}
	})
	if st, err := f.Stat(); err == nil {
		n, _ = f.ReadAt(buf, max(st.Size()-int64(len(buf)), 0))
		scan(buf[:n], func(at int64) { last = at })
	}
	return first, last
}

// waitForAdmissions waits (at most a minute) until process name has
// written n admissions of key k.
func waitForAdmissions(t *testing.T, dir, name string, k, n int) {
	t.Helper()
	waitForLines(t, dir, name, fmt.Sprintf("a %d ", k), n)
}

// waitForLines waits (at most a minute) until process name has written n
// lines that start with prefix.
func waitForLines(t *testing.T, dir, name, prefix string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil && bytes.Count(append([]byte("\n"), b...), []byte("\n"+prefix)) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %s wrote fewer than %d lines %q within a minute", name, n, prefix)
}

// Redis is killed (SIGKILL) and restarted from its append-only file while
// four guarded processes decide a hot key at its limit and a key far
// under its own: each goes on deciding from the blocks it holds, exactly,
// while Redis is down (the admissions made then, of the second key, whose
// blocks outlive the outage, are counted and logged), then the guard's
// fail-closed mode answers, then Redis again; nothing is over the limit
// across the outage.
func TestRedisKilledAndRestarted(t *testing.T) {
	// Every write reaches the append-only file before Redis answers it
	// (appendfsync no writes it at once, leaving the flush to the kernel:
	// a killed process loses nothing the kernel holds, and no fsync slows
	// a loaded disk).
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "no")
	r := run{addrs: []string{srv.Addr}, guarded: true, keys: fleetKeys(t, 2), limit: fleetLimits[0],
		other: core.Per(core.MaxRate, 10*time.Second).WithAlgorithm(core.FixedWindow), hold: 400 * time.Millisecond,
		duration: time.Minute, workerCount: 4, refunds: true, out: t.TempDir()}
	p := startFleet(t, 4, r)
	for i := range 4 {
		// The second key's blocks grow to its traffic over about one hold
		// (twice the last, at each take): wait for two.
		waitForTraffic(t, r.out, strconv.Itoa(i), 1, 2*r.hold)
	}
	down := time.Now().UnixMicro()
	srv.Kill()
	for i := range 4 { // the outage: each process decides from its blocks of the hot key, then fails closed
		waitForLines(t, r.out, strconv.Itoa(i), "f 0 ", 1)
	}
	up := time.Now().UnixMicro()
	srv.Restart(t)
	for i := range 4 { // deciding through Redis again
		waitForAdmissionsSince(t, r.out, strconv.Itoa(i), 0, time.Now().UnixMicro(), 20)
	}
	stopFleet(t, r)
	checkRun(t, r, p.wait(t, time.Minute))
	during := countedBetween(t, r.out, 1, down, up)
	t.Logf("admitted from blocks while Redis was down (%d ms): about %d", (up-down)/1000, during)
	if during == 0 {
		t.Fatal("no decision went on from the blocks held while Redis was down")
	}
}
