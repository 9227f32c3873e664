package servicebench

import (
	"context"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// DBRuleID is the rule of the rules database the DB churn variant decides
// by: NativeDimension, every endpoint, a token bucket of Rate per second.
const DBRuleID = "bench-per-user"

func dbRule(rate int64) rulesdb.Rule {
	return rulesdb.Rule{ID: DBRuleID, Name: "service benchmark", Dimension: NativeDimension, Limit: rate, WindowSeconds: 1,
		Algorithm: "token_bucket", Enabled: true}
}

// DBTarget is ratelimitd serving the rules of a SQLite database it shares
// with the benchmark (`ratelimitd serve --db file:PATH`, its memory store),
// loaded with native CheckRateLimit calls, and the Changer that writes its
// rule (rulesdb.Update, the admin API's write, each change a new revision
// ratelimitd polls for every 500 ms).
type DBTarget struct {
	Target
	Changer Changer
	db      *rulesdb.DB
	dir     string
	done    func()
}

// StartDBTarget creates the database in a temporary directory, stores the
// rule (Rate per second), starts ratelimitd with bin on it and returns the
// target of callers callers over users.
func StartDBTarget(ctx context.Context, bin string, conns, callers int, users []string) (*DBTarget, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-db-")
	if err != nil {
		return nil, err
	}
	d := &DBTarget{dir: dir}
	fail := func(err error) (*DBTarget, error) { d.Close(); return nil, err }
	path := filepath.Join(dir, "rules.db")
	if d.db, err = rulesdb.Open(ctx, path); err != nil {
		return fail(err)
	}
	if _, err := d.db.Create(ctx, "servicebench", dbRule(Rate)); err != nil {
		return fail(err)
	}
	p, err := StartRatelimitdDB(ctx, bin, "file:"+path, nil, nativeReady)
	if err != nil {
		return fail(err)
	}
	d.Target = Target{Name: "ratelimitd-db-memory-native", Server: p, ChecksPerCall: 1}
	gc, err := Dial(p.GRPCAddr, conns)
	if err != nil {
		p.Close()
		return fail(err)
	}
	dec, _, _ := nativeSingle(Conn{GRPC: gc, Users: users, Callers: callers})
	d.Decider = dec
	d.done = func() { closeAll(gc); p.Close() }
	d.Changer = Changer{
		Change: func(ctx context.Context, i int64) error {
			rate := int64(ChurnRate)
			if i%2 == 1 {
				rate = Rate
			}
			_, err := d.db.Update(ctx, "servicebench", dbRule(rate), "*")
			return err
		},
		Restore: func(ctx context.Context) error {
			cur, err := d.db.Get(ctx, DBRuleID)
			if err != nil {
				return err
			}
			if cur.Limit == Rate {
				return nil
			}
			_, err = d.db.Update(ctx, "servicebench", dbRule(Rate), "*")
			return err
		},
	}
	return d, nil
}

// Close stops ratelimitd and removes the database.
func (d *DBTarget) Close() {
	if d.done != nil {
		d.done()
	}
	if d.db != nil {
		_ = d.db.Close()
	}
	os.RemoveAll(d.dir)
}
