package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/grpcauth"
	"github.com/sluicehq/sluice/service/openapi"
	"github.com/sluicehq/sluice/service/remotestore"
)

// newGRPCServer builds the gRPC server: remotestore's server options
// (which accept the keepalive pings its clients send on idle connections;
// gRPC's default policy closes a connection pinged more often than every
// five minutes), the metrics' interceptor, the admin token check of
// --grpc-auth=admin, TLS, the stream workers and the connection age.
func (d *Daemon) newGRPCServer(tlsConf *tls.Config) (*grpc.Server, error) {
	c := &d.cfg
	gopts := append(remotestore.ServerOptions(), grpc.ChainUnaryInterceptor(d.metrics.unaryInterceptor))
	if c.grpcAuth() == grpcAuthAdmin {
		// ResetLimit and the store API need a token of the rules
		// database, checked by the admin API's Auth.
		ic, err := grpcauth.New(d.adminAuth, grpcauth.Options{Logger: d.log})
		if err != nil {
			return nil, err
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
	return grpc.NewServer(gopts...), nil
}

// adminAuth is the admin plane's Auth, for the gRPC admin calls: nil until
// the rules database is reached (those calls are UNAVAILABLE until then).
func (d *Daemon) adminAuth() *adminauth.Auth {
	if a := d.admin.Load(); a != nil {
		return a.authority()
	}
	return nil
}

// newMux returns the HTTP mux serving /metrics, /healthz, /readyz and the
// OpenAPI document of the HTTP APIs (/api/v1/openapi.json), and handle,
// which registers a handler on it timed under its route.
func (d *Daemon) newMux() (*http.ServeMux, func(pattern, route string, h http.Handler)) {
	mux := http.NewServeMux()
	handle := func(pattern, route string, h http.Handler) { mux.Handle(pattern, d.metrics.instrument(route, h)) }
	mux.Handle("GET /metrics", d.metrics.handler())
	handle("GET /healthz", "/healthz", http.HandlerFunc(d.health.serveLive))
	handle("GET /readyz", "/readyz", http.HandlerFunc(d.health.serveReady))
	handle("GET "+openapi.Path, openapi.Path, openapi.Handler())
	return mux, handle
}

// newHTTPServer is the HTTP server of mux, its errors logged as warnings.
func (d *Daemon) newHTTPServer(mux http.Handler) *http.Server {
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
}

// listeners are the daemon's: gRPC, HTTP (over TLS with --tls-cert), and
// pprof (nil without --pprof-addr).
type listeners struct{ grpc, http, pprof net.Listener }

// listen opens the listeners of c, each error naming its flag; on an error
// none is left open.
func listen(c *Config, tlsConf *tls.Config) (listeners, error) {
	gl, err := net.Listen("tcp", c.GRPCAddr)
	if err != nil {
		return listeners{}, fmt.Errorf("--grpc-addr: %w", err)
	}
	hl, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		_ = gl.Close()
		return listeners{}, fmt.Errorf("--http-addr: %w", err)
	}
	if tlsConf != nil {
		hl = tls.NewListener(hl, tlsConf)
	}
	ls := listeners{grpc: gl, http: hl}
	if c.PprofAddr != "" {
		if ls.pprof, err = net.Listen("tcp", c.PprofAddr); err != nil {
			_ = gl.Close()
			_ = hl.Close()
			return listeners{}, fmt.Errorf("--pprof-addr: %w", err)
		}
	}
	return ls, nil
}

// serve starts the loops that follow the store's health and the rules
// source (until bg ends) and the servers on ls. A loop or a server that
// stops on its own fails the daemon (Failed).
func (d *Daemon) serve(bg context.Context, ls listeners) {
	d.grpcAddr, d.httpAddr = ls.grpc.Addr().String(), ls.http.Addr().String()
	if d.store.ping == nil {
		d.health.set(componentStore, true) // the memory store: ready before "serving" is logged, not a moment after
	}
	d.loops.Go(func() { d.store.watch(bg, time.Second, d.log, func(ok bool) { d.health.set(componentStore, ok) }) })
	d.loops.Go(func() {
		// The engine follows the rules source until bg ends; it returns
		// early only on a source failure, which stops the service.
		if err := d.wiring.run(bg); err != nil {
			d.fail(fmt.Errorf("rules: %w", err))
		}
	})
	if w := d.wiring; w.rulesDB != nil && d.cfg.AuditRetention > 0 {
		now := d.now
		if now == nil {
			now = time.Now
		}
		d.loops.Go(func() { pruneAudit(bg, w.rulesDB, d.cfg.AuditRetention, now, d.log) })
	}
	d.servers.Go(func() {
		if err := d.grpc.Serve(ls.grpc); err != nil {
			d.fail(fmt.Errorf("grpc server: %w", err))
		}
	})
	d.servers.Go(func() {
		if err := d.http.Serve(ls.http); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.fail(fmt.Errorf("http server: %w", err))
		}
	})
	if ls.pprof != nil {
		d.pprofAddr = ls.pprof.Addr().String()
		d.pprof = &http.Server{Handler: pprofMux(), ReadHeaderTimeout: 5 * time.Second}
		d.servers.Go(func() { _ = d.pprof.Serve(ls.pprof) })
		d.log.Info("pprof serving", "addr", d.pprofAddr)
	}
}

// pprofMux serves net/http/pprof.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// shutdown stops the servers: the requests in flight finish within
// --shutdown-timeout (or until ctx ends), then whatever is left is cut.
func (d *Daemon) shutdown(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ShutdownTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		d.grpc.GracefulStop()
		close(done)
	}()
	if err := d.http.Shutdown(ctx); err != nil {
		d.log.Warn("http server: requests cut at the shutdown timeout", "error", err)
		_ = d.http.Close()
	}
	if d.pprof != nil {
		_ = d.pprof.Close()
	}
	select {
	case <-done:
	case <-ctx.Done():
		d.log.Warn("grpc server: calls cut at the shutdown timeout")
		d.grpc.Stop()
		<-done
	}
	d.servers.Wait()
}

// loadTLS returns the TLS configuration of --tls-cert/--tls-key, or nil.
func loadTLS(c *Config) (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}, nil
}
