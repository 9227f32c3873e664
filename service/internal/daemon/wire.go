package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/envoyrls"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/internal/traffic"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rules"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// wiring is what the daemon runs besides its servers: the engine
// following its rules source.
type wiring struct {
	engine *engine.Engine
	// rulesDB is the database source of --db (nil without --db); its DB()
	// is nil while the database has not been reached yet.
	rulesDB *rulesdb.Source
	// close releases the rules source (the database of --db), after the
	// engine has stopped following it.
	close func()
	// admin is the admin API and page of --db (nil without --db), whose
	// Auth also guards the gRPC admin calls.
	admin *admin
	// traffic counts the decisions for the admin page (nil without --db);
	// fleet publishes them to Redis and sums the fleet's (nil without).
	traffic *traffic.Recorder
	fleet   *traffic.Fleet
}

// run follows the rules source until ctx ends (engine.Run: a valid change
// is put in force, an invalid one logged and counted, the last good rules
// kept).
func (w *wiring) run(ctx context.Context) error { return w.engine.Run(ctx) }

// revision is the rules revision in force.
func (w *wiring) revision() string { return w.engine.Snapshot().Revision() }

// dbOpenTimeout bounds reaching the rules database at start; past it an
// instance with a --rules-cache starts from the cache.
const dbOpenTimeout = 10 * time.Second

// rulesSource is the source of --db, of --rules, or the bundled example,
// and what releases it.
func rulesSource(ctx context.Context, c *Config, log *slog.Logger) (rules.Source, *rulesdb.Source, func(), error) {
	switch {
	case c.DB != "":
		opts := []rulesdb.SourceOption{rulesdb.WithLogger(log), rulesdb.WithDBOptions(rulesdb.WithTimeout(c.DBTimeout))}
		if c.RulesCache != "" {
			opts = append(opts, rulesdb.WithCache(c.RulesCache))
		}
		octx, cancel := context.WithTimeout(ctx, dbOpenTimeout)
		defer cancel()
		src, err := rulesdb.OpenSource(octx, c.DB, c.DBPoll, opts...)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--db: %w", err)
		}
		return src, src, func() {
			if d := src.DB(); d != nil {
				_ = d.Close()
			}
		}, nil
	case c.Rules == "":
		return rules.NewBytes("example.yaml", rules.Example()), nil, func() {}, nil
	}
	return rules.NewFile(c.Rules, rules.WithPollInterval(c.RulesPoll), rules.WithLogger(log)), nil, func() {}, nil
}

// wire builds the engine on the daemon's store under the rules of --rules
// or --db and registers the front doors on the gRPC server and, through
// handle, on the HTTP mux.
func (d *Daemon) wire(ctx context.Context, gs *grpc.Server, handle func(pattern, route string, h http.Handler)) (*wiring, error) {
	w, recent, err := d.newEngine(ctx)
	if err != nil {
		return nil, err
	}
	d.register(w, recent, gs, handle)
	return w, nil
}

// newEngine builds the engine under the rules source of the config, puts
// its first rules in force (health, metrics) and logs them. With --db it
// also returns the admin page's list of warned and throttled callers,
// which the engine feeds.
func (d *Daemon) newEngine(ctx context.Context) (*wiring, *engine.Recent, error) {
	c := &d.cfg
	src, db, closeSrc, err := rulesSource(ctx, c, d.log)
	if err != nil {
		return nil, nil, err
	}
	obs := &engineObserver{m: d.metrics, h: d.health, log: d.log}
	opts := []engine.Option{engine.WithObserver(obs), engine.WithLogger(d.log),
		engine.WithIdempotency(c.IdempotencyTTL, c.IdempotencyRepeats), engine.WithMaxClientSkew(c.MaxClientSkew),
		engine.WithBatchParallelism(c.batchParallelism())}
	if d.now != nil {
		opts = append(opts, engine.WithClock(d.now))
	}
	var recent *engine.Recent
	var rec *traffic.Recorder
	var fleet *traffic.Fleet
	if db != nil {
		obs.cachedAt = db.CachedAt
		recent = engine.NewRecent(recentWindow, recentMax)
		rec, fleet = d.newTraffic()
		opts = append(opts, engine.WithObserver(recent), engine.WithObserver(rec))
	}
	e, err := engine.New(ctx, d.store.store, src, opts...)
	if err != nil {
		closeSrc()
		if c.DB != "" {
			return nil, nil, fmt.Errorf("--db: %w", err)
		}
		return nil, nil, fmt.Errorf("--rules: %w", err)
	}
	s := e.Snapshot()
	obs.applied(s)
	d.log.Info("rules loaded", "revision", s.Revision(), "rules", len(s.Rules()))
	return &wiring{engine: e, rulesDB: db, close: closeSrc, traffic: rec, fleet: fleet}, recent, nil
}

// register puts the front doors of w's engine on gs and, through handle,
// on the HTTP mux: the native API, Envoy's protocol and its /json, the
// admin API and page (--db), the store API (--store-api) and the HTTP
// check API.
func (d *Daemon) register(w *wiring, recent *engine.Recent, gs *grpc.Server, handle func(pattern, route string, h http.Handler)) {
	apiOpts := []grpcapi.Option{grpcapi.WithLogger(d.log), grpcapi.WithMaxBatch(d.cfg.MaxBatch)}
	storeOpts := []remotestore.ServerOption{remotestore.WithLogger(d.log)}
	if w.rulesDB != nil {
		// With --db every gRPC admin change is audited (and refused when it
		// cannot be).
		w.admin = newAdmin(w.rulesDB, d.store.store, w.engine, recent, d.log, d.metrics.authFailure)
		w.admin.traffic, w.admin.fleet = w.traffic, w.fleet
		apiOpts = append(apiOpts, grpcapi.WithRecorder(w.admin.resetRecorder))
		storeOpts = append(storeOpts, remotestore.WithRecorder(w.admin.storeRecorder))
	}
	api := grpcapi.New(w.engine, apiOpts...)
	api.Register(gs)
	d.health.listen(func(component string, ok bool) {
		if component == componentDraining {
			if !ok {
				api.Drain()
			}
			return
		}
		api.SetComponent(component, ok)
	})

	// Envoy's protocol on the same gRPC server, and its /json on HTTP.
	rls := envoyrls.New(w.engine, envoyrls.WithLogger(d.log))
	rls.Register(gs)
	handle("/json", "/json", rls.JSONHandler())
	if w.admin != nil {
		w.admin.mount(handle) // the admin REST API (/api/v1/{rules,users,audit}) and page (/admin/)
	} else {
		mountNoAdmin(handle)
	}

	if d.cfg.StoreAPI {
		// The store API (remotestore): middleware instances use this
		// service's store as theirs, behind their own guard, in a key
		// namespace of its own (remotestore.PolicyPrefix).
		remotestore.NewServer(d.store.store, storeOpts...).Register(gs)
	}

	check := httpapi.New(w.engine, httpapi.WithStatusMode(d.cfg.HTTPStatusMode), httpapi.WithLogger(d.log))
	// Every method: the handler answers those it does not take with its
	// own problem+json 405.
	handle(httpapi.Path, httpapi.Path, check)
}
