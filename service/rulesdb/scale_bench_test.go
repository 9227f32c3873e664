package rulesdb

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/service/rules"
)

// Rules at scale, in the database: Open and Source.Load of a
// SQLite file holding 1 000 or 100 000 rules, one Update among them (a
// write checks the rules it can conflict with, as the engine would), and
// a Source's incremental load after it:
//
//	go test -run XXX -bench Scale -benchmem ./rulesdb

// scaleDimensions are the dimensions the rules are spread over, in turn.
var scaleDimensions = []string{"user", "ip", "api_key", "tenant"}

// scaleRow returns stored rule i of a large set: dimension
// scaleDimensions[i%4]; the first of each dimension for every endpoint, the
// others one endpoint pattern each, service by service (/api/v1/sS/**, then
// /api/v1/sS/rR/:id and /api/v1/sS/rR for 20 resources), algorithms in
// turn, enabled.
func scaleRow(i int) Rule {
	const resources = 20
	algos := []string{"token_bucket", "gcra", "fixed_window", "sliding_window_counter", "leaky_bucket", "sliding_window_log"}
	dim := scaleDimensions[i%len(scaleDimensions)]
	r := Rule{ID: fmt.Sprintf("r%d-%s", i, dim), Name: "scale " + strconv.Itoa(i), Dimension: dim,
		Limit: 1000, WindowSeconds: 60, Algorithm: algos[i%len(algos)], Enabled: true}
	if k := i / len(scaleDimensions); k > 0 {
		per := 1 + 2*resources
		s, m := (k-1)/per, (k-1)%per
		switch {
		case m == 0:
			r.EndpointPattern = fmt.Sprintf("/api/v1/s%d/**", s)
		case m%2 == 1:
			r.EndpointPattern = fmt.Sprintf("/api/v1/s%d/r%d/:id", s, (m-1)/2)
		default:
			r.EndpointPattern = fmt.Sprintf("/api/v1/s%d/r%d", s, (m-2)/2)
		}
	}
	return r
}

// fillScale writes n rules (scaleRow) into the database at path in one
// transaction with one revision, as a bulk import would (Create writes
// and validates one rule at a time, which at 100 000 rules takes hours),
// and returns the database closed.
func fillScale(b *testing.B, path string, n int) {
	b.Helper()
	ctx := context.Background()
	d, err := Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	rev, err := d.bump(ctx, tx)
	if err != nil {
		b.Fatal(err)
	}
	stmt, err := tx.PrepareContext(ctx, d.q(`INSERT INTO rules (`+ruleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for i := range n {
		r := scaleRow(i)
		if _, err := stmt.ExecContext(ctx, r.ID, r.Name, r.Dimension, r.EndpointPattern, r.Limit, r.WindowSeconds, r.Algorithm,
			r.Tier, r.Burst, r.Shadow, r.Enabled, rev, now, now); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

var scaleDBSizes = []int{1000, 100_000}

// BenchmarkScaleLoad is what a starting ratelimitd does with a database of
// n rules: Open (schema check) and Source.Load (every rule read and
// validated into a snapshot), then Close.
func BenchmarkScaleLoad(b *testing.B) {
	for _, n := range scaleDBSizes {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "rules.db")
			fillScale(b, path, n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d, err := Open(ctx, path)
				if err != nil {
					b.Fatal(err)
				}
				s, err := d.Source(0).Load(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(s.Rules()) != n {
					b.Fatalf("%d rules loaded, want %d", len(s.Rules()), n)
				}
				_ = d.Close()
			}
		})
	}
}

// BenchmarkScaleUpdate is one Update (a rule's limit changed) among n
// stored rules: the write, its audit row and the check of the rules of its
// dimension and endpoint pattern in its transaction.
func BenchmarkScaleUpdate(b *testing.B) {
	for _, n := range scaleDBSizes {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "rules.db")
			fillScale(b, path, n)
			ctx := context.Background()
			d, err := Open(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			r := scaleRow(n / 2)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				r.Limit = 1000 + int64(i%2)
				if _, err := d.Update(ctx, "bench", r, "*"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScaleLoadIncremental is a Source's load after one Update among
// n stored rules, when it holds the previous load: the rows written since
// and the audit rows read, the state patched, the snapshot built (the
// Update itself is not timed).
func BenchmarkScaleLoadIncremental(b *testing.B) {
	for _, n := range scaleDBSizes {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "rules.db")
			fillScale(b, path, n)
			ctx := context.Background()
			d, err := Open(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			src := d.Source(0)
			if _, err := src.Load(ctx); err != nil {
				b.Fatal(err)
			}
			r := scaleRow(n / 2)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				r.Limit = 1000 + int64(i%2)
				if _, err := d.Update(ctx, "bench", r, "*"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				s, err := src.Load(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(s.Rules()) != n {
					b.Fatalf("%d rules loaded, want %d", len(s.Rules()), n)
				}
			}
			src.mu.Lock()
			full := src.loads.full
			src.mu.Unlock()
			b.ReportMetric(float64(full), "full-loads")
		})
	}
}

// BenchmarkScaleWatch is the propagation of one Update among 100 000
// stored rules to another handle's Watch (PostgreSQL: its NOTIFY; SQLite:
// a 5 ms poll), from the Update's return to the new snapshot handed to
// apply, which is all a Source does (an engine then builds its limiters:
// engine.New).
func BenchmarkScaleWatch(b *testing.B) {
	const n = 100_000
	for _, be := range []struct {
		name string
		dsn  func() string
	}{
		{"sqlite", func() string { return filepath.Join(b.TempDir(), "rules.db") }},
		{"postgres", func() string { return pg.NewDatabase(b) }},
	} {
		b.Run(be.name, func(b *testing.B) {
			dsn := be.dsn()
			fillScale(b, dsn, n)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w, err := Open(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			r, err := Open(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			src := r.Source(5 * time.Millisecond)
			if _, err := src.Load(ctx); err != nil {
				b.Fatal(err)
			}
			applied := make(chan string, 16)
			done := make(chan error, 1)
			go func() {
				done <- src.Watch(ctx, func(s *rules.Snapshot) error { applied <- s.Revision(); return nil }, func(err error) { b.Error(err) })
			}()
			row := scaleRow(n / 2)
			i := 0
			for b.Loop() {
				i++
				row.Limit = 1000 + int64(i%2)
				got, err := w.Update(ctx, "bench", row, "*")
				if err != nil {
					b.Fatal(err)
				}
				want := strconv.FormatInt(got.Revision, 10)
				for rev := <-applied; rev != want; rev = <-applied {
				}
			}
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			src.mu.Lock()
			b.ReportMetric(float64(src.loads.full), "full-loads")
			src.mu.Unlock()
		})
	}
}
