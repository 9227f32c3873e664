// Package rulesbench holds the rules-at-scale benchmark of module
// github.com/sluicehq/sluice/bench (ratelimitd), shared by its go
// test benchmarks and its report program (cmd/report): the latency of one
// engine.Check on the memory store with 10, 1 000 and 100 000 native rules
// in force, the time and memory of building a snapshot (rules.New) and an
// engine on it (engine.New), and the time to open and load a SQLite rules
// database of that size (rulesdb.Open + Source.Load) and to update one rule
// in it.
//
// Every size holds the same few rules the measured check matches; the
// others are spread as a large deployment's would be (Rules), so only the
// rule count changes. The target: no measurable change in
// decision latency from 10 to 100 000 rules (matching costs the path's
// depth, not the rule count).
package rulesbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Sizes are the rule counts compared.
var Sizes = []int{10, 1000, 100_000}

// Dimensions are the dimensions the rules are spread over, in turn.
var Dimensions = []string{"user", "ip", "api_key", "tenant"}

// Resources is the number of resources per service: each has a rule on its
// collection (/api/v1/sS/rR) and one on its items (/api/v1/sS/rR/:id), and
// each service one on everything under it (/api/v1/sS/**).
const Resources = 20

// Endpoint and Dimension are those of the measured check. At every size it
// matches MatchedRules rules of its dimension: the one for every endpoint,
// /api/v1/s0/** and /api/v1/s0/r0/:id (the rules of other dimensions with
// those patterns are never looked at: the engine has a limiter per
// dimension).
const (
	Endpoint     = "/api/v1/s0/r0/42"
	Dimension    = "user"
	MatchedRules = 3
)

// Users is the number of identifiers the checks go over in turn.
const Users = 1024

// Rate is every rule's limit per second: never reached by the checks.
const Rate = 1_000_000_000

// pattern returns the endpoint pattern of rule i ("" for every endpoint):
// the first rule of each dimension has none, the next ones go service by
// service: /api/v1/sS/**, then /api/v1/sS/rR/:id and /api/v1/sS/rR for each
// resource.
func pattern(i int) string {
	k := i / len(Dimensions)
	if k == 0 {
		return ""
	}
	per := 1 + 2*Resources
	s, m := (k-1)/per, (k-1)%per
	switch {
	case m == 0:
		return fmt.Sprintf("/api/v1/s%d/**", s)
	case m%2 == 1:
		return fmt.Sprintf("/api/v1/s%d/r%d/:id", s, (m-1)/2)
	}
	return fmt.Sprintf("/api/v1/s%d/r%d", s, (m-2)/2)
}

// id is the ID of rule i.
func id(i int) string { return "r" + strconv.Itoa(i) + "-" + Dimensions[i%len(Dimensions)] }

// Rules returns n native rules: rule i is of dimension Dimensions[i%4] with
// the endpoint pattern described at pattern; every one a token bucket of
// Rate per second.
func Rules(n int) []*rules.Rule {
	out := make([]*rules.Rule, n)
	lim := core.PerSecond(Rate)
	for i := range out {
		r := &rules.Rule{ID: id(i), Dimension: Dimensions[i%len(Dimensions)], Limit: lim, Source: rules.Position{File: "rulesbench", Line: i + 1}}
		if p := pattern(i); p != "" {
			r.Endpoints = []string{p}
		}
		out[i] = r
	}
	return out
}

// Row returns rule i of Rules as the rules database stores it (enabled,
// Rate per second).
func Row(i int) rulesdb.Rule {
	return rulesdb.Rule{ID: id(i), Name: "rulesbench " + strconv.Itoa(i), Dimension: Dimensions[i%len(Dimensions)],
		EndpointPattern: pattern(i), Limit: Rate, WindowSeconds: 1, Algorithm: "token_bucket", Enabled: true}
}

// Snapshot builds the snapshot of n rules and checks that the measured
// check matches MatchedRules of them.
func Snapshot(n int) (*rules.Snapshot, error) {
	s, err := rules.New("rulesbench-"+strconv.Itoa(n), Rules(n), nil)
	if err != nil {
		return nil, err
	}
	if got := len(s.Match("", Dimension, Endpoint)); got != MatchedRules {
		return nil, fmt.Errorf("rulesbench: %d rules: the check matches %d rules, want %d", n, got, MatchedRules)
	}
	return s, nil
}

// staticSource is a rules.Source of one snapshot that never changes.
type staticSource struct{ s *rules.Snapshot }

func (s staticSource) Load(context.Context) (*rules.Snapshot, error) { return s.s, nil }

func (s staticSource) Watch(ctx context.Context, _ func(*rules.Snapshot) error, _ func(error)) error {
	<-ctx.Done()
	return nil
}

// Setup is an engine under n rules on its own memory store, its keys
// created (every user checked once).
type Setup struct {
	N        int
	Snapshot *rules.Snapshot
	Engine   *engine.Engine
	store    *memorystore.Store
	checks   []engine.Check
}

// NewSetup builds the Setup of n rules.
func NewSetup(ctx context.Context, n int) (*Setup, error) {
	snap, err := Snapshot(n)
	if err != nil {
		return nil, err
	}
	st, err := memorystore.New()
	if err != nil {
		return nil, err
	}
	e, err := engine.New(ctx, st, staticSource{snap})
	if err != nil {
		st.Close()
		return nil, err
	}
	s := &Setup{N: n, Snapshot: snap, Engine: e, store: st, checks: make([]engine.Check, Users)}
	for i := range s.checks {
		s.checks[i] = engine.Check{Dimension: Dimension, Identifier: "user-" + strconv.Itoa(i), Endpoint: Endpoint, Cost: 1}
	}
	for i := range s.checks {
		if err := s.check(ctx, i); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Close releases the setup's store.
func (s *Setup) Close() { s.store.Close() }

func (s *Setup) check(ctx context.Context, i int) error {
	r, err := s.Engine.Check(ctx, s.checks[i&(Users-1)])
	switch {
	case err != nil:
		return err
	case !r.Allowed:
		return fmt.Errorf("rulesbench: %d rules: check denied by %s", s.N, r.Rule)
	case len(r.Decision.Results) != MatchedRules:
		return fmt.Errorf("rulesbench: %d rules: %d rules decided the check, want %d", s.N, len(r.Decision.Results), MatchedRules)
	}
	return nil
}

// CheckSample is one timed run of checks.
type CheckSample struct {
	Checks           int64
	Ns, Allocs, Byte float64 // per check
}

// Checks runs checks from one goroutine for about d (at least 1000) and
// returns the time and allocations per check.
func (s *Setup) Checks(ctx context.Context, d time.Duration) (CheckSample, error) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	var n int64
	for n == 0 || time.Since(start) < d {
		for range 1000 {
			if err := s.check(ctx, int(n)); err != nil {
				return CheckSample{}, err
			}
			n++
		}
	}
	el := time.Since(start)
	runtime.ReadMemStats(&m1)
	f := float64(n)
	return CheckSample{Checks: n, Ns: float64(el.Nanoseconds()) / f,
		Allocs: float64(m1.Mallocs-m0.Mallocs) / f, Byte: float64(m1.TotalAlloc-m0.TotalAlloc) / f}, nil
}

// BuildSample is the cost of putting n rules in force.
type BuildSample struct {
	N int
	// Snapshot is one rules.New of the n rules (already in memory), Engine
	// one engine.New on that snapshot: the time of each, averaged over the
	// builds made.
	Snapshot, Engine time.Duration
	// SnapshotHeap is the live heap one snapshot holds with its rules;
	// EngineHeap the live heap of one engine beyond its snapshot.
	SnapshotHeap, EngineHeap float64
	Builds                   int
}

// Build measures the snapshot and engine builds of n rules, repeated
// until each took at least minTotal in all (at least twice).
func Build(ctx context.Context, n int, minTotal time.Duration) (BuildSample, error) {
	out := BuildSample{N: n}
	var snap *rules.Snapshot
	var err error
	out.SnapshotHeap = retained(func() any {
		snap, err = Snapshot(n)
		return snap
	})
	if err != nil {
		return out, err
	}
	st, err := memorystore.New()
	if err != nil {
		return out, err
	}
	defer st.Close()
	src := staticSource{snap}
	out.EngineHeap = retained(func() any {
		var e *engine.Engine
		e, err = engine.New(ctx, st, src)
		return e
	})
	if err != nil {
		return out, err
	}
	rs := Rules(n)
	out.Snapshot, out.Builds, err = repeat(minTotal, func() error {
		_, err := rules.New("rulesbench", rs, nil)
		return err
	})
	if err != nil {
		return out, err
	}
	out.Engine, _, err = repeat(minTotal, func() error {
		_, err := engine.New(ctx, st, src)
		return err
	})
	return out, err
}

// repeat calls f until minTotal has passed (at least twice) and returns
// the mean time of one call.
func repeat(minTotal time.Duration, f func() error) (time.Duration, int, error) {
	runtime.GC()
	start := time.Now()
	n := 0
	for n < 2 || time.Since(start) < minTotal {
		if err := f(); err != nil {
			return 0, n, err
		}
		n++
	}
	return time.Since(start) / time.Duration(n), n, nil
}

// retained returns the growth of the live heap, in bytes, while what build
// returns is alive.
func retained(build func() any) float64 {
	before := liveHeap()
	v := build()
	after := liveHeap()
	runtime.KeepAlive(v)
	return float64(after) - float64(before)
}

// liveHeap is HeapAlloc after garbage collections, repeated until it stops
// shrinking (at most 5).
func liveHeap() uint64 {
	var m runtime.MemStats
	last := ^uint64(0)
	for range 5 {
		runtime.GC()
		runtime.ReadMemStats(&m)
		if m.HeapAlloc >= last {
			break
		}
		last = m.HeapAlloc
	}
	return m.HeapAlloc
}

// FillDB creates the SQLite rules database at path (rulesdb.Open: the
// schema) and writes the n rules of Row into it in one transaction at a new
// revision, as a bulk import would: rulesdb's own writes validate the
// whole rule set on each one, so 100 000 Creates would take hours. It
// writes the rules table of schema version 1 directly.
func FillDB(ctx context.Context, path string, n int) error {
	return FillRows(ctx, path, 0, n)
}

// FillRows is FillDB for rows from … from+n-1 of Row into the database at
// dsn: a SQLite path or file:PATH, or postgres://… (whose schema Open
// brings up to date too).
func FillRows(ctx context.Context, dsn string, from, n int) error {
	db, pg, err := openRaw(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var rev int64
	if err := tx.QueryRowContext(ctx, `UPDATE revision SET value = value + 1 WHERE id = 1 RETURNING value`).Scan(&rev); err != nil {
		return fmt.Errorf("rulesbench: revision: %w", err)
	}
	const batch = 500 // rows per statement: 6500 parameters
	now := time.Now().UnixMilli()
	args := make([]any, 0, batch*insertCols)
	flush := func(rows int) error {
		if _, err := tx.ExecContext(ctx, insertRules(rows, rev, pg), args...); err != nil {
			return fmt.Errorf("rulesbench: insert rules: %w", err)
		}
		args = args[:0]
		return nil
	}
	pending := 0
	for i := from; i < from+n; i++ {
		r := Row(i)
		args = append(args, r.ID, r.Name, r.Dimension, r.EndpointPattern, r.Limit, r.WindowSeconds, r.Algorithm,
			r.Tier, r.Burst, r.Shadow, r.Enabled, now, now)
		if pending++; pending == batch {
			if err := flush(pending); err != nil {
				return err
			}
			pending = 0
		}
	}
	if pending > 0 {
		if err := flush(pending); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// openRaw brings the schema of the database at dsn up to date
// (rulesdb.Open) and opens it with its driver alone; pg: it is
// PostgreSQL.
func openRaw(ctx context.Context, dsn string) (db *sql.DB, pg bool, err error) {
	d, err := rulesdb.Open(ctx, dsn)
	if err != nil {
		return nil, false, err
	}
	if err := d.Close(); err != nil {
		return nil, false, err
	}
	pg = strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
	if pg {
		db, err = sql.Open("pgx", dsn)
	} else {
		db, err = sql.Open("sqlite", "file:"+strings.TrimPrefix(dsn, "file:")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	}
	return db, pg, err
}

// insertCols is how many parameters a row of insertRules takes: every
// column but the revision, which is written as a literal.
const insertCols = 13

// insertRules is the INSERT of rows rules at revision rev, in the
// placeholders of PostgreSQL (pg) or SQLite.
func insertRules(rows int, rev int64, pg bool) string {
	var q strings.Builder
	q.WriteString(`INSERT INTO rules (id, name, dimension, endpoint_pattern, "limit", window_seconds, algorithm, tier, burst, shadow, enabled, revision, created_at, updated_at) VALUES `)
	for r := range rows {
		if r > 0 {
			q.WriteString(", ")
		}
		q.WriteByte('(')
		for c := range insertCols + 1 {
			if c > 0 {
				q.WriteString(", ")
			}
			switch {
			case c == 11:
				q.WriteString(strconv.FormatInt(rev, 10))
			case pg:
				k := c
				if c > 11 {
					k--
				}
				q.WriteString("$" + strconv.Itoa(r*insertCols+k+1))
			default:
				q.WriteByte('?')
			}
		}
		q.WriteByte(')')
	}
	return q.String()
}

// LoadDB is what a starting ratelimitd does with the database at path:
// rulesdb.Open (the schema check), Source.Load (every rule read and
// validated into a snapshot) and Close. It checks that n rules were loaded
// and returns the time taken.
func LoadDB(ctx context.Context, path string, n int) (time.Duration, error) {
	start := time.Now()
	d, err := rulesdb.Open(ctx, path)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	s, err := d.Source(0).Load(ctx)
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	if len(s.Rules()) != n {
		return took, fmt.Errorf("rulesbench: %d rules loaded, want %d", len(s.Rules()), n)
	}
	return took, nil
}

// UpdateDB changes the limit of one rule among the n of the database at
// path, count times (Update with If-Match "*", as the admin API's PUT does
// with the rule's ETag), and returns the mean time of one write: its
// transaction validates the whole resulting rule set.
func UpdateDB(ctx context.Context, path string, n, count int) (time.Duration, error) {
	if n < 1 || count < 1 {
		return 0, errors.New("rulesbench: UpdateDB: n and count must be positive")
	}
	d, err := rulesdb.Open(ctx, path)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	r := Row(n / 2)
	start := time.Now()
	for i := range count {
		r.Limit = Rate - int64(i%2)
		if _, err := d.Update(ctx, "rulesbench", r, "*"); err != nil {
			return 0, err
		}
	}
	return time.Since(start) / time.Duration(count), nil
}
