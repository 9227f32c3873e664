package rules_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rules"
)

func ruleFile(rate string) string {
	return "rules:\n  - {name: a, dimension: user, limit: " + rate + ", window_seconds: 1}\n"
}

// watcher runs src.Watch and collects what it reports.
type watcher struct {
	snaps  chan *rules.Snapshot
	errs   chan error
	cancel context.CancelFunc
	done   chan error
}

func watch(t *testing.T, src rules.Source) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{snaps: make(chan *rules.Snapshot, 16), errs: make(chan error, 16), cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- src.Watch(ctx, func(s *rules.Snapshot) error { w.snaps <- s; return nil }, func(err error) { w.errs <- err })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-w.done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return after its context ended")
		}
	})
	return w
}

func (w *watcher) snap(t *testing.T) *rules.Snapshot {
	t.Helper()
	select {
	case s := <-w.snaps:
		return s
	case err := <-w.errs:
		t.Fatalf("want a snapshot, got error %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no snapshot within 5s")
	}
	return nil
}

func (w *watcher) err(t *testing.T) error {
	t.Helper()
	select {
	case s := <-w.snaps:
		t.Fatalf("want an error, got snapshot %s", s.Revision())
	case err := <-w.errs:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no error within 5s")
	}
	return nil
}

// quiet asserts nothing is reported for a few polls.
func (w *watcher) quiet(t *testing.T) {
	t.Helper()
	select {
	case s := <-w.snaps:
		t.Fatalf("unexpected snapshot %s", s.Revision())
	case err := <-w.errs:
		t.Fatalf("unexpected error %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}

func rateOf(t *testing.T, s *rules.Snapshot) int64 {
	t.Helper()
	r, ok := s.Rule("a")
	require.True(t, ok)
	return r.Limit.Rate
}

// write replaces path's content atomically, as editors and config
// management do.
func write(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(data), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func TestFileReloadKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write(t, path, ruleFile("1"))
	src := rules.NewFile(path, rules.WithPollInterval(10*time.Millisecond))
	s, err := src.Load(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(1), rateOf(t, s))

	w := watch(t, src)
	w.quiet(t) // unchanged since Load: nothing to apply

	write(t, path, ruleFile("2"))
	s2 := w.snap(t)
	require.Equal(t, int64(2), rateOf(t, s2))
	require.NotEqual(t, s.Revision(), s2.Revision())

	// A broken edit is reported once, naming file:line:field; nothing is applied.
	write(t, path, ruleFile("0"))
	err = w.err(t)
	require.ErrorContains(t, err, path+":2: rules[0].limit: must be a whole number >= 1")
	w.quiet(t)

	// Fixed again: applied.
	write(t, path, ruleFile("3"))
	require.Equal(t, int64(3), rateOf(t, w.snap(t)))

	// Deleted: an error, once; the last good stays (nothing applied).
	require.NoError(t, os.Remove(path))
	require.ErrorContains(t, w.err(t), "no such file")
	w.quiet(t)

	// Back with the content in force: applied once more, so the caller
	// hears the source is good again, then quiet; with new content: applied.
	write(t, path, ruleFile("3"))
	again := w.snap(t)
	require.Equal(t, int64(3), rateOf(t, again))
	w.quiet(t)
	write(t, path, ruleFile("4"))
	require.Equal(t, int64(4), rateOf(t, w.snap(t)))

	// A broken edit undone: the content in force, applied once more.
	write(t, path, ruleFile("0"))
	require.ErrorContains(t, w.err(t), "rules[0].limit")
	write(t, path, ruleFile("4"))
	require.Equal(t, int64(4), rateOf(t, w.snap(t)))
	w.quiet(t)
}

func TestFileSymlinkSwap(t *testing.T) {
	// Kubernetes ConfigMaps swap a "..data" symlink to a new directory.
	dir := t.TempDir()
	v1 := filepath.Join(dir, "v1")
	v2 := filepath.Join(dir, "v2")
	require.NoError(t, os.Mkdir(v1, 0o700))
	require.NoError(t, os.Mkdir(v2, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(v1, "rules.yaml"), []byte(ruleFile("1")), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(v2, "rules.yaml"), []byte(ruleFile("2")), 0o600))
	data := filepath.Join(dir, "..data")
	require.NoError(t, os.Symlink(v1, data))
	link := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.Symlink(filepath.Join("..data", "rules.yaml"), link))

	src := rules.NewFile(link, rules.WithPollInterval(10*time.Millisecond))
	s, err := src.Load(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(1), rateOf(t, s))
	w := watch(t, src)

	tmp := filepath.Join(dir, "..data_tmp")
	require.NoError(t, os.Symlink(v2, tmp))
	require.NoError(t, os.Rename(tmp, data))
	require.Equal(t, int64(2), rateOf(t, w.snap(t)))
	w.quiet(t)
}

func TestFileWatchWithoutLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write(t, path, ruleFile("5"))
	w := watch(t, rules.NewFile(path, rules.WithPollInterval(10*time.Millisecond)))
	require.Equal(t, int64(5), rateOf(t, w.snap(t)))
	w.quiet(t)
}

func TestFileLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := rules.NewFile(filepath.Join(dir, "missing.yaml")).Load(context.Background())
	require.ErrorContains(t, err, "missing.yaml: no such file")

	path := filepath.Join(dir, "big.yaml")
	write(t, path, ruleFile("1"))
	_, err = rules.NewFile(path, rules.WithMaxBytes(8)).Load(context.Background())
	require.ErrorContains(t, err, "larger than 8 bytes")

	_, err = rules.NewFile(path, rules.WithPollInterval(0)).Load(context.Background())
	require.ErrorContains(t, err, "WithPollInterval: must be at least 1ms")

	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o700))
	_, err = rules.NewFile(empty).Load(context.Background())
	require.ErrorContains(t, err, "no *.yaml or *.yml file")
}

func TestBytesSource(t *testing.T) {
	src := rules.NewBytes("inline.yaml", []byte(ruleFile("7")))
	s, err := src.Load(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(7), rateOf(t, s))
	_, err = rules.NewBytes("bad.yaml", []byte(ruleFile("x"))).Load(context.Background())
	require.ErrorContains(t, err, "bad.yaml:2: rules[0].limit")
	// Its options apply as Parse's do.
	_, err = rules.NewBytes("big.yaml", []byte(ruleFile("7")), rules.WithMaxBytes(10)).Load(context.Background())
	require.ErrorContains(t, err, "big.yaml: the file is larger than 10 bytes")
	_, err = rules.NewBytes("inline.yaml", []byte(ruleFile("7")), rules.WithMaxRules(0)).Load(context.Background())
	require.ErrorContains(t, err, "WithMaxRules: must be at least 1")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.NoError(t, src.Watch(ctx, func(*rules.Snapshot) error { t.Error("applied"); return nil }, func(error) { t.Error("error") }))
}

func TestExampleRules(t *testing.T) {
	s, err := rules.Parse("example.yaml", rules.Example())
	require.NoError(t, err)
	require.Equal(t, []string{"api-per-user"}, names(s.Match("", "user", "/api/v1/orders")))
	require.Equal(t, []string{"login-per-ip"}, names(s.Match("", "ip", "/login")))
	require.Equal(t, "pro", s.TierOf("user", "alice"))
	// A fresh copy each time.
	e := rules.Example()
	e[0] = 'X'
	require.True(t, strings.HasPrefix(string(rules.Example()), "#"))
}
