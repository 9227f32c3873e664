package leasebench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/core/redisstore"
)

// ChildEnv marks a process started by RunHotKey: its value is the task,
// "addr;mode;goroutines;duration;hold;rate;period;dir".
const ChildEnv = "SLUICE_LEASEBENCH_CHILD"

// MaybeChild runs the task of a process started by RunHotKey and exits,
// if this process is one; otherwise it returns at once.
func MaybeChild() {
	v := os.Getenv(ChildEnv)
	if v == "" {
		return
	}
	if err := child(v); err != nil {
		fmt.Fprintln(os.Stderr, "leasebench child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// task is what a process of HotKey is told.
type task struct {
	addr, mode string
	goroutines int
	duration   time.Duration
	hold       time.Duration
	limit      core.Limit
	dir        string // the go file is dir/go; the process waits for it
}

func (t task) env() string {
	return fmt.Sprintf("%s=%s;%s;%d;%d;%d;%d;%d;%s", ChildEnv, t.addr, t.mode, t.goroutines, t.duration, t.hold, t.limit.Rate, t.limit.Period, t.dir)
}

func parseTask(v string) (task, error) {
	f := strings.Split(v, ";")
	if len(f) != 8 {
		return task{}, fmt.Errorf("%s: %d fields", ChildEnv, len(f))
	}
	var n [5]int64
	for i := range n {
		x, err := strconv.ParseInt(f[2+i], 10, 64)
		if err != nil {
			return task{}, fmt.Errorf("%s: field %d: %w", ChildEnv, 2+i, err)
		}
		n[i] = x
	}
	return task{addr: f[0], mode: f[1], goroutines: int(n[0]), duration: time.Duration(n[1]), hold: time.Duration(n[2]),
		limit: hotLimit(n[3], time.Duration(n[4])), dir: f[7]}, nil
}

// hotLimit is the hot identity's limit: a fixed window.
func hotLimit(rate int64, period time.Duration) core.Limit {
	return core.Per(rate, period).WithAlgorithm(core.FixedWindow)
}

// child decides the hot key from its goroutines for the task's duration,
// once the go file exists, and prints "decisions admitted".
func child(v string) error {
	t, err := parseTask(v)
	if err != nil {
		return err
	}
	client := redisbench.NewClient(t.addr, t.goroutines)
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.WithTimeout(5*time.Second))
	if err != nil {
		return err
	}
	var store core.Store = rs
	hold := time.Duration(0)
	if t.mode == "leased" {
		ls, err := lease.New(rs)
		if err != nil {
			return err
		}
		defer ls.Close()
		store, hold = ls, t.hold
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(filepath.Join(t.dir, "go")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no go file within a minute")
		}
	}
	decisions, admitted, err := hammer(store, core.Key{Identity: "hot"}, t.limit, hold, t.goroutines, t.duration)
	if err != nil {
		return err
	}
	fmt.Println(decisions, admitted)
	return nil
}

// hammer decides key from goroutines as fast as they can for d, and
// returns the decisions and admissions.
func hammer(s core.Store, key core.Key, l core.Limit, hold time.Duration, goroutines int, d time.Duration) (int64, int64, error) {
	var decisions, admitted atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	stop := time.Now().Add(d)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ops := [1]core.Op{{Key: key, Limit: l, Cost: 1, Lease: hold}}
			var out [1]core.Result
			n, a := int64(0), int64(0)
			for ; n&63 != 0 || time.Now().Before(stop); n++ {
				if err := s.Take(context.Background(), ops[:], out[:]); err != nil {
					first.CompareAndSwap(nil, err)
					break
				}
				if out[0].Allowed {
					a++
				}
			}
			decisions.Add(n)
			admitted.Add(a)
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return 0, 0, err
	}
	return decisions.Load(), admitted.Load(), nil
}
