package redistest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// ChildEnv names the environment variable that marks a process started by
// StartProcesses: its value is "<task> <index>".
const ChildEnv = "SLUICE_REDISTEST_CHILD"

// Child reports whether this test binary was started by StartProcesses, and
// if so the task it was given and its index. A test package that uses
// StartProcesses calls it first thing in TestMain and, in a child, runs the
// task instead of the tests (its output goes to the parent), then exits.
func Child() (task string, index int, ok bool) {
	v := os.Getenv(ChildEnv)
	if v == "" {
		return "", 0, false
	}
	var i int
	if _, err := fmt.Sscanf(v, "%s %d", &task, &i); err != nil {
		return "", 0, false
	}
	return task, i, true
}

// StartProcesses runs n copies of the running test binary as child
// processes, each with env added to its environment and ChildEnv set to
// "<task> <index>", and waits (at most timeout) for all of them. It returns
// each child's standard output; a child that fails or runs out of time
// fails the test, with its standard error. Load from several processes
// exercises what goroutines of one process cannot: separate connection
// pools, schedulers and clocks, as separate instances of an application.
func StartProcesses(t testing.TB, n int, task string, env []string, timeout time.Duration) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	outs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), env...), ChildEnv+"="+task+" "+strconv.Itoa(i))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("redistest: starting child %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("child %d (%s): %w\n%s", i, task, err, stderr.String())
			}
			outs[i] = stdout.String()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
	}
	return outs
}
