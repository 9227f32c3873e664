package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sluicehq/sluice/bench/membench"
)

// churnGoal bounds the sweeper's share of decision latency under churn:
// p99 with the sweeper on over p99 with it off.
const churnGoal = 1.5

// churnRow is the median of the runs of one churn variant.
type churnRow struct {
	sweeper bool
	runs    []membench.ChurnResult
	med     membench.ChurnResult
	failed  string
}

// churnSection is the churn area: sluice's memory store only.
type churnSection struct {
	timing
	d    time.Duration
	rows []churnRow // sweeper on, then off
}

func (c *churnSection) run(d time.Duration, count int) {
	c.d = d
	c.rows = []churnRow{{sweeper: true}, {sweeper: false}}
	for rep := range count {
		for j := range c.rows {
			row := &c.rows[(j+rep)%len(c.rows)]
			if row.failed != "" {
				continue
			}
			r, err := membench.Churn(d, row.sweeper)
			if err != nil {
				row.failed = err.Error()
				fmt.Fprintf(os.Stderr, "%s/sweeper=%v run %d/%d: FAILED: %v\n", churnScenario, row.sweeper, rep+1, count, err)
				continue
			}
			row.runs = append(row.runs, r)
			fmt.Fprintf(os.Stderr, "%s/sweeper=%v run %d/%d: p99 %s p999 %s max %s, %d churned keys\n", churnScenario, row.sweeper, rep+1, count, r.P99, r.P999, r.Max, r.ChurnKeys)
		}
	}
	for i := range c.rows {
		row := &c.rows[i]
		if len(row.runs) == 0 {
			continue
		}
		dur := func(f func(membench.ChurnResult) time.Duration) time.Duration {
			return time.Duration(median(row.runs, func(r membench.ChurnResult) float64 { return float64(f(r)) }))
		}
		cnt := func(f func(membench.ChurnResult) int64) int64 {
			return int64(median(row.runs, func(r membench.ChurnResult) float64 { return float64(f(r)) }))
		}
		row.med = membench.ChurnResult{
			Sweeper:   row.sweeper,
			Duration:  dur(func(r membench.ChurnResult) time.Duration { return r.Duration }),
			Decisions: cnt(func(r membench.ChurnResult) int64 { return r.Decisions }),
			ChurnKeys: cnt(func(r membench.ChurnResult) int64 { return r.ChurnKeys }),
			Evictions: cnt(func(r membench.ChurnResult) int64 { return r.Evictions }),
			P50:       dur(func(r membench.ChurnResult) time.Duration { return r.P50 }),
			P99:       dur(func(r membench.ChurnResult) time.Duration { return r.P99 }),
			P999:      dur(func(r membench.ChurnResult) time.Duration { return r.P999 }),
			Max:       dur(func(r membench.ChurnResult) time.Duration { return r.Max }),
			InsertMax: dur(func(r membench.ChurnResult) time.Duration { return r.InsertMax }),
		}
	}
}

// row returns the variant's row if it ran.
func (c *churnSection) row(sweeper bool) *churnRow {
	for i := range c.rows {
		if r := &c.rows[i]; r.sweeper == sweeper && r.failed == "" && len(r.runs) > 0 {
			return r
		}
	}
	return nil
}

// target is the churn line of the summary.
func (c *churnSection) target() target {
	t := target{name: "in memory, decision p99 during churn of short-lived keys: sweeper on within 1.5× of sweeper off", goal: "≤ 1.50×"}
	on, off := c.row(true), c.row(false)
	if on == nil || off == nil || off.med.P99 <= 0 {
		t.missing = "a churn variant failed or was not run"
		return t
	}
	t.ratio = float64(on.med.P99) / float64(off.med.P99)
	t.met = t.ratio <= churnGoal
	t.measured = fmt.Sprintf("p99 %s vs %s; p999 %s vs %s", fmtDur(on.med.P99), fmtDur(off.med.P99), fmtDur(on.med.P999), fmtDur(off.med.P999))
	t.why = fmt.Sprintf("max %s vs %s (the scheduler of a shared machine included); %s vs %s keys churned", fmtDur(on.med.Max), fmtDur(off.med.Max), humanCount(int(on.med.ChurnKeys)), humanCount(int(off.med.ChurnKeys)))
	return t
}

func (c *churnSection) write(w io.Writer, o options) {
	fmt.Fprintf(w, "\n## Decision latency during churn\n\n")
	fmt.Fprintf(w, "sluice's memory store with its defaults (bounded to 1M keys, a sweep every second). One goroutine inserts new keys, each used once under a limit of 1 per %s so that it expires %s later, as fast as it can; meanwhile the measuring goroutine makes decisions on %d existing hot keys in turn and times each one. The same run with the sweeper off (`WithSweepInterval(0)`: expired keys are deleted only when touched or evicted) shows what the sweeper adds.\n\n", membench.ChurnLifetime, membench.ChurnLifetime, membench.ChurnHotKeys)
	fmt.Fprintf(w, "- %s timed per run, median of %d runs per variant, variants interleaved; took %s; 1-minute load average %s\n", c.d, o.churnCount, c.took.Round(time.Second), c.load)
	fmt.Fprintf(w, "- latencies are wall time of one `Take`, from a log-linear histogram (within 1/16); on a shared machine the maxima include the scheduler's own stalls\n\n")
	fmt.Fprintln(w, "| sweeper | p50 | p99 | p999 | max | longest insert | decisions timed | keys churned | evictions |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range c.rows {
		name := "on"
		if !row.sweeper {
			name = "off"
		}
		if row.failed != "" || len(row.runs) == 0 {
			fmt.Fprintf(w, "| %s | FAILED: %s | | | | | | | |\n", name, cell(row.failed))
			continue
		}
		m := row.med
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d | %d | %d |\n", name, fmtDur(m.P50), fmtDur(m.P99), fmtDur(m.P999), fmtDur(m.Max), fmtDur(m.InsertMax), m.Decisions, m.ChurnKeys, m.Evictions)
	}
}

// fmtDur prints d with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.3g µs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.3g ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.3g s", d.Seconds())
}
