package servicebench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Rule churn: the service benchmark's load while the rules
// change once per second, against the same load with no change.

// ChurnInterval is how often the rules change during a churn run.
const ChurnInterval = time.Second

// ChurnRate is the other limit of the measured rule during a churn run:
// the rules file alternates between RulesYAML (Rate per second) and
// RulesYAMLRate(ChurnRate), so every change is a change of the rule every
// check of the load is decided by (neither limit is ever reached).
const ChurnRate = Rate - 1

// RulesYAMLRate is RulesYAML with the user rule at rate per second.
func RulesYAMLRate(rate int) []byte {
	return []byte(strings.Replace(string(RulesYAML()), "requests_per_unit: "+strconv.Itoa(Rate), "requests_per_unit: "+strconv.Itoa(rate), 1))
}

// Churn rewrites the rules file at path every interval until ctx ends,
// alternating RulesYAMLRate(ChurnRate) and RulesYAML (the first write
// changes the rule), each write atomic (a new file renamed over the old, as
// a GitOps deployment replaces it). It returns the number of changes
// written, and the first error.
func Churn(ctx context.Context, path string, interval time.Duration) (int64, error) {
	return churn(ctx, FileChanger(path), interval)
}

// RestoreRules writes RulesYAML back to path (after a churn run).
func RestoreRules(path string) error { return writeAtomic(path, RulesYAML()) }

// Changer changes a server's rules during a churn run.
type Changer struct {
	// Change makes change i (0, 1, …): the first changes the rule every
	// check is decided by, each next one changes it back or again.
	Change func(ctx context.Context, i int64) error
	// Restore puts the original rules back after the run.
	Restore func(ctx context.Context) error
}

// FileChanger rewrites the rules file at path (Churn's changes).
func FileChanger(path string) Changer {
	return Changer{
		Change: func(_ context.Context, i int64) error {
			data := RulesYAMLRate(ChurnRate)
			if i%2 == 1 {
				data = RulesYAML()
			}
			return writeAtomic(path, data)
		},
		Restore: func(context.Context) error { return RestoreRules(path) },
	}
}

// churn calls ch.Change every interval until ctx ends and returns the
// number of changes made, and the first error.
func churn(ctx context.Context, ch Changer, interval time.Duration) (int64, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var n int64
	for {
		select {
		case <-ctx.Done():
			return n, nil
		case <-t.C:
		}
		if err := ch.Change(ctx, n); err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, err
		}
		n++
	}
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".rules-*.yaml")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("rules file: %w", err)
	}
	return nil
}

// Reloads returns ratelimitd's count of rules reloads put in force
// (ratelimitd_rules_reloads_total{result="ok"}) and refused
// ({result="error"}), from its /metrics on httpAddr.
func Reloads(ctx context.Context, httpAddr string) (ok, failed int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, found := strings.Cut(line, " ")
		if !found || !strings.HasPrefix(name, "ratelimitd_rules_reloads_total{") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("metrics: %q: %w", line, err)
		}
		switch {
		case strings.Contains(name, `result="ok"`):
			ok = int64(v)
		case strings.Contains(name, `result="error"`):
			failed = int64(v)
		}
	}
	return ok, failed, sc.Err()
}

// ChurnImpl is the implementation the churn runs measure: ratelimitd on
// Redis answering ShouldRateLimit (ratelimitd-redis of Impls).
func ChurnImpl() Impl {
	for _, im := range Impls() {
		if im.Name == "ratelimitd-redis" {
			return im
		}
	}
	panic("servicebench: no ratelimitd-redis implementation")
}

// ChurnResult is a churn run's own figures.
type ChurnResult struct {
	// Written is the number of rule changes written during the measured
	// load; Applied and Refused the reloads ratelimitd counted meanwhile
	// (a change written near the end is applied after the run).
	Written, Applied, Refused int64
}

// RunChurn is Run with the rules of t's ratelimitd (started by
// StartRatelimitd: its RulesFile) rewritten every interval during the
// measured load (Churn). Afterwards it restores RulesYAML and waits until
// ratelimitd has applied it (its poll interval is a second), so that the
// next run starts under the original rules and with no reload pending. It
// fails if a change was refused or none was applied. interval should be at
// least ratelimitd's poll (a second): a change reverted before a poll is
// never seen.
func RunChurn(ctx context.Context, t Target, cfg RunConfig, interval time.Duration) (Sample, ChurnResult, error) {
	if t.Server == nil || t.Server.RulesFile == "" {
		return Sample{}, ChurnResult{}, fmt.Errorf("%s: rule churn needs a ratelimitd with a rules file", t.Name)
	}
	return RunChurnWith(ctx, t, cfg, interval, FileChanger(t.Server.RulesFile))
}

// RunChurnWith is RunChurn with the changes ch makes (a rules file
// rewritten, or a rules database written).
func RunChurnWith(ctx context.Context, t Target, cfg RunConfig, interval time.Duration, ch Changer) (Sample, ChurnResult, error) {
	var cr ChurnResult
	if t.Server == nil || t.Server.HTTPAddr == "" {
		return Sample{}, cr, fmt.Errorf("%s: rule churn needs a ratelimitd with an HTTP listener", t.Name)
	}
	ok0, bad0, err := Reloads(ctx, t.Server.HTTPAddr)
	if err != nil {
		return Sample{}, cr, fmt.Errorf("%s: %w", t.Name, err)
	}
	var written atomic.Int64
	errc := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start, stop := cfg.Start, cfg.Stop
	cfg.Start = func() {
		if start != nil {
			start()
		}
		go func() {
			n, err := churn(cctx, ch, interval)
			written.Store(n)
			errc <- err
		}()
	}
	cfg.Stop = func() {
		cancel()
		if stop != nil {
			stop()
		}
	}
	s, err := Run(ctx, t, cfg)
	cancel()
	churnErr := <-errc
	cr.Written = written.Load()
	if err != nil {
		return s, cr, err
	}
	if churnErr != nil {
		return s, cr, fmt.Errorf("%s: rewriting the rules: %w", t.Name, churnErr)
	}
	ok1, bad1, err := Reloads(ctx, t.Server.HTTPAddr)
	if err != nil {
		return s, cr, fmt.Errorf("%s: %w", t.Name, err)
	}
	cr.Applied, cr.Refused = ok1-ok0, bad1-bad0
	if err := settle(ctx, t.Server, ch, ok1); err != nil {
		return s, cr, fmt.Errorf("%s: %w", t.Name, err)
	}
	return s, cr, t.checkApplied(ctx, ok0, bad0, cr.Written)
}

// checkApplied fails if t's ratelimitd, whose reloads were ok0 applied and
// bad0 refused before the run, refused a change since, or applied none of
// the written ones. A change written near the end of the run is applied
// after it: by now every change written has been applied.
func (t Target) checkApplied(ctx context.Context, ok0, bad0, written int64) error {
	ok2, bad2, err := Reloads(ctx, t.Server.HTTPAddr)
	if err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	switch {
	case bad2 > bad0:
		return fmt.Errorf("%s: ratelimitd refused %d of the rule changes%s", t.Name, bad2-bad0, t.serverLog())
	case written > 0 && ok2 == ok0:
		return fmt.Errorf("%s: ratelimitd applied none of the %d rule changes%s", t.Name, written, t.serverLog())
	}
	return nil
}

// settle waits until p has applied the last change, restores the original
// rules (ch.Restore) and waits until p has applied them (if they differ
// from those in force): each wait ends after 1.5 s without a reload (or
// fails after 5 s).
func settle(ctx context.Context, p *Process, ch Changer, last int64) error {
	// The last change first (it may have been written right before the
	// load stopped), then the original rules.
	last, err := quiet(ctx, p, last)
	if err != nil {
		return err
	}
	if err := ch.Restore(ctx); err != nil {
		return err
	}
	_, err = quiet(ctx, p, last)
	return err
}

// quiet waits (up to 5 s) until p has made no reload for 1.5 s, last being
// its reload count when called, and returns the count then.
func quiet(ctx context.Context, p *Process, last int64) (int64, error) {
	deadline := time.Now().Add(5 * time.Second)
	since := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		ok, _, err := Reloads(ctx, p.HTTPAddr)
		if err != nil {
			return last, err
		}
		if ok != last {
			last, since = ok, time.Now()
		}
		if time.Since(since) >= 1500*time.Millisecond {
			return last, nil
		}
	}
	return last, fmt.Errorf("rules still reloading 5 s after the churn stopped")
}
