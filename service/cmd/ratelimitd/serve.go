package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/grpcauth"
	"github.com/sluicehq/sluice/service/remotestore"
)

// serveCmd runs `ratelimitd serve`.
func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	var c serveConfig
	fs := newServeFlags(&c)
	rest, err := parseFlags(fs, args, servePrefix, env)
	if errors.Is(err, flag.ErrHelp) {
		flagUsage(stdout, fs, servePrefix, "usage: ratelimitd serve [flags]")
		return 0
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q (flags only)", rest[0])
	}
	if err == nil {
		err = c.validate()
	}
	if err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintf(stderr, "ratelimitd serve: %s\n", line)
		}
		fmt.Fprintln(stderr, "ratelimitd serve -h lists the flags")
		return 2
	}
	log := newLogger(stderr, &c)
	if err := serve(ctx, &c, log); err != nil {
		log.Error("ratelimitd failed", "error", err)
		return 1
	}
	return 0
}

// newLogger returns the logger of c (validated).
func newLogger(w io.Writer, c *serveConfig) *slog.Logger {
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve runs the service until ctx ends, then drains and stops: health
// reports NOT_SERVING at once, the servers keep answering for the drain
// delay (so load balancers see it and move away), then stop within the
// shutdown timeout. It returns nil after a clean shutdown.
func serve(ctx context.Context, c *serveConfig, log *slog.Logger) error {
	log.Info("ratelimitd starting", c.attrs()...)
	m, err := newMetrics()
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	h := newHealth()
	h.listen(func(component string, ok bool) {
		if component == componentDraining {
			component = "serving"
		}
		m.setUp(component, ok)
	})
	h.set(componentDraining, true)

	st, err := openStore(c, log, m.limiter)
	if err != nil {
		return err
	}
	defer st.close()

	// The rules source (--db's database) is released after the loops
	// following it have stopped (defers run last first).
	closeRules := func() {}
	defer func() { closeRules() }()
	// bg runs the loops that must outlive ctx while draining (store
	// health, rules reload); it ends when serve returns, and the loops
	// have stopped before the store closes.
	var loops sync.WaitGroup
	defer loops.Wait()
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()

	tlsConf, err := loadTLS(c)
	if err != nil {
		return err
	}
	// remotestore's server options accept the keepalive pings its clients
	// send on idle connections (gRPC's default policy closes a connection
	// pinged more often than every five minutes).
	gopts := append(remotestore.ServerOptions(), grpc.ChainUnaryInterceptor(m.unaryInterceptor))
	// --grpc-auth=admin: ResetLimit and the store API need a token of the
	// rules database, checked by the admin API's Auth (built once the
	// database is reached: until then those calls are UNAVAILABLE).
	var adm atomic.Pointer[admin]
	if c.grpcAuth() == grpcAuthAdmin {
		ic, err := grpcauth.New(func() *adminauth.Auth {
			if a := adm.Load(); a != nil {
				return a.authority()
			}
			return nil
		}, grpcauth.Options{Logger: log})
		if err != nil {
			return err
		}
		gopts = append(gopts, grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	}
	if tlsConf != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	if c.StreamWorkers > 0 {
		gopts = append(gopts, grpc.NumStreamWorkers(uint32(c.StreamWorkers)))
	}
	if c.MaxConnAge > 0 {
		gopts = append(gopts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge: c.MaxConnAge, MaxConnectionAgeGrace: 30 * time.Second,
		}))
	}
	gs := grpc.NewServer(gopts...)
	mux := http.NewServeMux()
	handle := func(pattern, route string, hd http.Handler) { mux.Handle(pattern, m.instrument(route, hd)) }
	mux.Handle("GET /metrics", m.handler())
	handle("GET /healthz", "/healthz", http.HandlerFunc(h.serveLive))
	handle("GET /readyz", "/readyz", http.HandlerFunc(h.serveReady))

	w, err := wire(bg, c, log, st, m, h, gs, handle)
	if err != nil {
		return err
	}
	closeRules = w.close
	if w.admin != nil {
		adm.Store(w.admin)
	}
	if w.rulesDB != nil && w.rulesDB.Listener().Enabled {
		h.watchListener(w.rulesDB.Listener)
		if err := m.watchListener(w.rulesDB.Listener); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}

	gl, err := net.Listen("tcp", c.GRPCAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	hl, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		_ = gl.Close()
		return fmt.Errorf("--http-addr: %w", err)
	}
	if tlsConf != nil {
		hl = tls.NewListener(hl, tlsConf)
	}
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	if st.ping == nil {
		h.set(componentStore, true) // the memory store: ready before "serving" is logged, not a moment after
	}
	loops.Go(func() { st.watch(bg, time.Second, log, func(ok bool) { h.set(componentStore, ok) }) })
	runErr := make(chan error, 4)
	loops.Go(func() {
		// The engine follows the rules source until bg ends; it returns
		// early only on a source failure, which stops the service.
		if err := w.run(bg); err != nil {
			runErr <- fmt.Errorf("rules: %w", err)
		}
	})
	go func() {
		if err := gs.Serve(gl); err != nil {
			runErr <- fmt.Errorf("grpc server: %w", err)
		}
	}()
	go func() {
		if err := hs.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			runErr <- fmt.Errorf("http server: %w", err)
		}
	}()
	var ps *http.Server
	if c.PprofAddr != "" {
		ps, err = startPprof(c.PprofAddr, log)
		if err != nil {
			gs.Stop()
			_ = hs.Close()
			return err
		}
	}
	log.Info("ratelimitd serving", "grpc_addr", gl.Addr().String(), "http_addr", hl.Addr().String(),
		"store", st.name, "rules_revision", w.revision())

	var failed error
	select {
	case <-ctx.Done():
		log.Info("ratelimitd draining: health reports NOT_SERVING", "drain_delay", c.DrainDelay)
	case failed = <-runErr:
		log.Error("ratelimitd stopping", "error", failed)
	}
	h.set(componentDraining, false)
	if failed == nil && c.DrainDelay > 0 {
		t := time.NewTimer(c.DrainDelay)
		select {
		case <-t.C:
		case failed = <-runErr:
			t.Stop()
		}
	}
	shutdown(c.ShutdownTimeout, log, gs, hs, ps)
	if failed != nil {
		return failed
	}
	log.Info("ratelimitd stopped")
	return nil
}

// shutdown stops the servers: the requests in flight finish within timeout,
// then whatever is left is cut.
func shutdown(timeout time.Duration, log *slog.Logger, gs *grpc.Server, hs, ps *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	if err := hs.Shutdown(ctx); err != nil {
		log.Warn("http server: requests cut at the shutdown timeout", "error", err)
		_ = hs.Close()
	}
	if ps != nil {
		_ = ps.Close()
	}
	select {
	case <-done:
	case <-ctx.Done():
		log.Warn("grpc server: calls cut at the shutdown timeout")
		gs.Stop()
		<-done
	}
}

// loadTLS returns the TLS configuration of --tls-cert/--tls-key, or nil.
func loadTLS(c *serveConfig) (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}, nil
}

// startPprof serves net/http/pprof on addr.
func startPprof(addr string, log *slog.Logger) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.Serve(l) }()
	log.Info("pprof serving", "addr", l.Addr().String())
	return s, nil
}
