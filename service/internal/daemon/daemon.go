package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// Daemon is one ratelimitd: New validates its Config, Start builds
// everything and listens, Close drains and stops it. Start and Close are
// called once each, from one goroutine; the other methods are safe for
// concurrent use once Start has returned.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time // nil: time.Now (WithClock)
	metrics *metrics
	health  *health

	// Built by Start, released by Close (or by Start when it fails).
	store  *storeSet
	wiring *wiring
	// admin, with --db, is the admin plane whose Auth also guards the
	// gRPC admin calls; nil until the database is reached.
	admin       atomic.Pointer[admin]
	grpc        *grpc.Server
	http, pprof *http.Server
	// The addresses listened on.
	grpcAddr, httpAddr, pprofAddr string
	// stopLoops ends the loops that follow the store and the rules.
	stopLoops context.CancelFunc
	loops     sync.WaitGroup
	// servers are the servers' Serve calls.
	servers sync.WaitGroup

	startCalled bool // Start was called
	running     bool // Start succeeded: Close has work to do

	failOnce sync.Once
	failed   chan struct{}
	failure  error // set before failed is closed

	closeOnce sync.Once
	closeErr  error
}

// Option changes what New builds beyond its Config.
type Option func(*Daemon)

// WithClock sets the clock the memory store decides on (the store without
// --redis, and fallback mode's local limiter) and the engine's
// (engine.WithClock), for tests; Redis decides on its own clock. The
// default is time.Now.
func WithClock(now func() time.Time) Option { return func(d *Daemon) { d.now = now } }

// New returns the daemon of c, logging to log (nil: nowhere). It checks c
// (Config.Validate) and builds the metrics and the health; it contacts
// nothing and listens on nothing.
func New(c Config, log *slog.Logger, opts ...Option) (*Daemon, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics()
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	h := newHealth()
	h.listen(func(component string, ok bool) {
		if component == componentDraining {
			component = "serving"
		}
		m.setUp(component, ok)
	})
	h.set(componentDraining, true)
	d := &Daemon{cfg: c, log: log, metrics: m, health: h, failed: make(chan struct{})}
	for _, o := range opts {
		o(d)
	}
	return d, nil
}

// Start builds the store, the rules source and the engine, the servers and
// their front doors, listens on the configured addresses and serves. It
// returns once the service answers, or with the first error, having
// released whatever it had built (invalid rules or an address in use stop
// it before it serves). ctx bounds the start only (reaching the rules
// database, loading the rules): the daemon runs until Close.
func (d *Daemon) Start(ctx context.Context) error {
	if d.startCalled {
		return errors.New("daemon: Start: called twice")
	}
	d.startCalled = true
	d.log.Info("ratelimitd starting", d.cfg.attrs()...)
	d.applyGC()
	if err := d.start(ctx); err != nil {
		d.release()
		return err
	}
	d.running = true
	d.log.Info("ratelimitd serving", "grpc_addr", d.grpcAddr, "http_addr", d.httpAddr,
		"store", d.store.name, "rules_revision", d.wiring.revision())
	return nil
}

// start is Start's work; what it built is released by the caller when it
// fails.
func (d *Daemon) start(ctx context.Context) error {
	st, err := openStore(&d.cfg, d.log, d.metrics.limiter, d.now)
	if err != nil {
		return err
	}
	d.store = st
	// The loops (store health, rules reload) run until Close, not until
	// ctx ends.
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.stopLoops = stop
	tlsConf, err := loadTLS(&d.cfg)
	if err != nil {
		return err
	}
	if d.grpc, err = d.newGRPCServer(tlsConf); err != nil {
		return err
	}
	mux, handle := d.newMux()
	if d.wiring, err = d.wire(ctx, d.grpc, handle); err != nil {
		return err
	}
	if err := d.followAdmin(d.wiring); err != nil {
		return err
	}
	d.runTraffic(bg, d.wiring)
	ls, err := listen(&d.cfg, tlsConf)
	if err != nil {
		return err
	}
	d.http = d.newHTTPServer(mux)
	d.serve(bg, ls)
	return nil
}

// followAdmin, with --db, lets the gRPC admin calls use the admin plane's
// Auth and makes /readyz and the metrics report the rules listener.
func (d *Daemon) followAdmin(w *wiring) error {
	if w.admin != nil {
		d.admin.Store(w.admin)
	}
	if w.rulesDB != nil && w.rulesDB.Listener().Enabled {
		d.health.watchListener(w.rulesDB.Listener)
		if err := d.metrics.watchListener(w.rulesDB.Listener); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// GRPCAddr is the address the gRPC server listens on (127.0.0.1:port),
// once Start has returned.
func (d *Daemon) GRPCAddr() string { return d.grpcAddr }

// HTTPAddr is the address the HTTP server listens on, once Start has
// returned.
func (d *Daemon) HTTPAddr() string { return d.httpAddr }

// PprofAddr is the address of --pprof-addr's server once Start has
// returned; "" without one.
func (d *Daemon) PprofAddr() string { return d.pprofAddr }

// Failed is closed when the daemon fails on its own after Start: a server
// stopped serving, or the rules source failed. Its owner then calls Close,
// which returns that failure.
func (d *Daemon) Failed() <-chan struct{} { return d.failed }

// fail records the daemon's first failure.
func (d *Daemon) fail(err error) {
	d.failOnce.Do(func() {
		d.failure = err
		close(d.failed)
	})
}

// failedWith is the daemon's failure, nil while it has none.
func (d *Daemon) failedWith() error {
	select {
	case <-d.failed:
		return d.failure
	default:
		return nil
	}
}

// Close drains and stops the daemon: health reports NOT_SERVING at once,
// the servers keep answering for --drain-delay (so load balancers see it
// and move away), then stop within --shutdown-timeout (the requests in
// flight finish, what is left is cut); the rules loops stop, then the
// rules database and the store are closed. The end of ctx cuts the drain
// short and the requests in flight at once. After a failure (Failed) there
// is no drain delay and Close returns the failure; otherwise nil. Close
// before a successful Start does nothing; later calls return the first
// one's result.
func (d *Daemon) Close(ctx context.Context) error {
	d.closeOnce.Do(func() {
		if d.running {
			d.closeErr = d.close(ctx)
		}
	})
	return d.closeErr
}

func (d *Daemon) close(ctx context.Context) error {
	failed := d.failedWith()
	if failed == nil {
		d.log.Info("ratelimitd draining: health reports NOT_SERVING", "drain_delay", d.cfg.DrainDelay)
	} else {
		d.log.Error("ratelimitd stopping", "error", failed)
	}
	d.health.set(componentDraining, false)
	if failed == nil {
		failed = d.drain(ctx)
	}
	d.shutdown(ctx)
	d.release()
	if failed != nil {
		return failed
	}
	d.log.Info("ratelimitd stopped")
	return nil
}

// drain waits out the drain delay while the servers still answer; a
// failure (returned) or the end of ctx cuts it short.
func (d *Daemon) drain(ctx context.Context) error {
	if d.cfg.DrainDelay <= 0 {
		return nil
	}
	t := time.NewTimer(d.cfg.DrainDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-d.failed:
		return d.failure
	}
	return nil
}

// release stops the loops and closes what Start built, last built first:
// the gRPC server (its stream workers), the rules source, the store. The
// servers have stopped serving (or never started).
func (d *Daemon) release() {
	if d.grpc != nil {
		d.grpc.Stop()
	}
	if d.stopLoops != nil {
		d.stopLoops()
	}
	d.loops.Wait()
	if d.wiring != nil {
		d.wiring.close()
	}
	if d.store != nil {
		d.store.close()
	}
}
