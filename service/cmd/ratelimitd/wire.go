package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/envoyrls"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rules"
)

// wiring is what serve runs besides its servers: the engine following its
// rules source.
type wiring struct {
	engine *engine.Engine
}

// run follows the rules source until ctx ends (engine.Run: a valid change
// is put in force, an invalid one logged and counted, the last good rules
// kept).
func (w *wiring) run(ctx context.Context) error { return w.engine.Run(ctx) }

// revision is the rules revision in force.
func (w *wiring) revision() string { return w.engine.Snapshot().Revision() }

// rulesSource is the source of --rules, or the bundled example.
func rulesSource(c *serveConfig) rules.Source {
	if c.Rules == "" {
		return rules.NewBytes("example.yaml", rules.Example())
	}
	return rules.NewFile(c.Rules, rules.WithPollInterval(c.RulesPoll))
}

// wire builds the engine on st under the rules of --rules and registers the
// front doors on the gRPC server and, through handle, on the HTTP mux.
func wire(ctx context.Context, c *serveConfig, log *slog.Logger, st *storeSet, m *metrics, h *health,
	gs *grpc.Server, handle func(pattern, route string, h http.Handler)) (*wiring, error) {
	obs := &engineObserver{m: m, h: h, log: log}
	e, err := engine.New(ctx, st.store, rulesSource(c), engine.WithObserver(obs), engine.WithLogger(log),
		engine.WithIdempotency(c.IdempotencyTTL, c.IdempotencyRepeats), engine.WithMaxClientSkew(c.MaxClientSkew),
		engine.WithBatchParallelism(c.batchParallelism()))
	if err != nil {
		return nil, fmt.Errorf("--rules: %w", err)
	}
	s := e.Snapshot()
	obs.applied(s)
	log.Info("rules loaded", "revision", s.Revision(), "rules", len(s.Rules()))

	api := grpcapi.New(e, grpcapi.WithLogger(log), grpcapi.WithMaxBatch(c.MaxBatch))
	api.Register(gs)
	h.listen(func(component string, ok bool) {
		if component == componentDraining {
			if !ok {
				api.Drain()
			}
			return
		}
		api.SetComponent(component, ok)
	})

	// Envoy's protocol on the same gRPC server, and its /json on HTTP.
	rls := envoyrls.New(e, envoyrls.WithLogger(log))
	rls.Register(gs)
	handle("/json", "/json", rls.JSONHandler())

	if c.StoreAPI {
		// The store API (remotestore): middleware instances use this
		// service's store as theirs, behind their own guard.
		remotestore.NewServer(st.store, remotestore.WithLogger(log)).Register(gs)
	}

	check := httpapi.New(e, httpapi.WithStatusMode(c.HTTPStatusMode), httpapi.WithLogger(log))
	// Every method: the handler answers those it does not take with its
	// own problem+json 405.
	handle(httpapi.Path, httpapi.Path, check)
	return &wiring{engine: e}, nil
}
