package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/adminapi"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/adminui"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/grpcapi"
	"github.com/sluicehq/sluice/service/internal/problem"
	"github.com/sluicehq/sluice/service/internal/requestid"
	"github.com/sluicehq/sluice/service/internal/traffic"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// The admin page's list of warned and throttled callers: those of the last
// recentWindow, at most recentMax (the oldest dropped first).
const (
	recentWindow = 5 * time.Minute
	recentMax    = 10_000
)

// admin serves the admin REST API (adminapi) and the admin page (adminui)
// over the database of --db, both behind ONE adminauth.Auth: one cache of
// authenticated tokens (a revocation reaches both within its TTL) and one
// per-token rate limit. An instance started from its rules cache while the
// database is down has no database yet: both are built when it is reached
// and answer 503 until then.
type admin struct {
	src   *rulesdb.Source
	build func(*rulesdb.DB) (auth *adminauth.Auth, api, page http.Handler, err error)
	log   *slog.Logger
	// The page's traffic: set before the first build.
	traffic *traffic.Recorder
	fleet   *traffic.Fleet

	mu        sync.Mutex
	auth      *adminauth.Auth // also guards the gRPC admin calls (--grpc-auth=admin)
	api, page http.Handler
	failed    bool
}

// newAdmin returns the admin plane over src's database, told to onAuthFailure
// of each failed authentication (the metrics).
func newAdmin(src *rulesdb.Source, store core.Store, e *engine.Engine, recent *engine.Recent, log *slog.Logger, onAuthFailure func(string)) *admin {
	a := &admin{src: src, log: log}
	a.build = func(d *rulesdb.DB) (*adminauth.Auth, http.Handler, http.Handler, error) {
		auth, err := adminauth.New(d, store, adminauth.Options{Logger: log, OnFailure: onAuthFailure})
		if err != nil {
			return nil, nil, nil, err
		}
		// Every write is in force on this instance before it is answered
		// (src.Sync: the engine follows src).
		api, err := adminapi.New(adminapi.Options{DB: d, Engine: e, Auth: auth, Logger: log, Sync: src})
		if err != nil {
			return nil, nil, nil, err
		}
		page, err := adminui.New(adminui.Options{DB: d, Engine: e, Auth: auth, Recent: recent, Logger: log, Sync: src,
			Traffic: a.traffic, Fleet: a.fleet})
		if err != nil {
			return nil, nil, nil, err
		}
		return auth, api, page, nil
	}
	return a
}

// mount registers the API's paths and the page's /admin/ through handle.
func (a *admin) mount(handle func(pattern, route string, h http.Handler)) {
	api := http.HandlerFunc(a.serveAPI)
	for _, p := range adminapi.Paths() {
		handle(p, p, api)
	}
	handle("/admin/", "/admin/", http.HandlerFunc(a.servePage))
}

// handlers returns the API and the page, built on the first call after the
// database is reached; nil before (or when building them failed: logged
// once).
func (a *admin) handlers() (api, page http.Handler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.buildLocked()
	return a.api, a.page
}

// authority returns the Auth of the API and the page, for the gRPC admin
// calls: the same token cache and per-token limits; nil until the
// database is reached (or when building failed).
func (a *admin) authority() *adminauth.Auth {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.buildLocked()
	return a.auth
}

func (a *admin) buildLocked() {
	if a.api == nil && !a.failed {
		if d := a.src.DB(); d != nil {
			auth, api, page, err := a.build(d)
			if err != nil {
				a.failed = true
				a.log.Error("admin API and page: not served", "error", err)
				return
			}
			a.auth, a.api, a.page = auth, api, page
		}
	}
}

func (a *admin) serveAPI(w http.ResponseWriter, r *http.Request) {
	h, _ := a.handlers()
	if h == nil {
		w.Header().Set("Retry-After", "5")
		adminProblem(w, r, http.StatusServiceUnavailable, "the admin API needs the rules database, which has not been reached yet")
		return
	}
	h.ServeHTTP(w, r)
}

// mountNoAdmin registers, through handle, the admin API's paths on an
// instance without a rules database (its rules from a file): each is a
// 404 problem saying that the admin API needs --db.
func mountNoAdmin(handle func(pattern, route string, h http.Handler)) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		adminProblem(w, r, http.StatusNotFound, "no admin API: it is served with a rules database (--db); this instance reads its rules from a file")
	})
	for _, p := range adminapi.Paths() {
		handle(p, p, h)
	}
}

// adminProblem answers an admin API request the API itself cannot serve
// as it answers its own errors: problem+json, not stored, with the
// request's X-Request-Id (the client's when valid, else a new one).
func adminProblem(w http.ResponseWriter, r *http.Request, status int, detail string) {
	id := r.Header.Get("X-Request-Id")
	if !requestid.Valid(id) {
		id = requestid.New()
	}
	w.Header().Set("X-Request-Id", id)
	w.Header().Set("Cache-Control", "no-store")
	problem.Write(w, r, status, problem.New(r, status, http.StatusText(status), detail))
}

func (a *admin) servePage(w http.ResponseWriter, r *http.Request) {
	_, h := a.handlers()
	if h == nil {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "the admin page needs the rules database, which has not been reached yet", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// recordTimeout bounds recording one gRPC admin change: the audit row's
// transaction, held while the store makes the change.
const recordTimeout = 10 * time.Second

// errNoDatabase refuses a gRPC admin change while the rules database (the
// audit log) has not been reached: nothing may change unrecorded.
var errNoDatabase = errors.New("the rules database has not been reached yet: the change cannot be audited")

// record makes one change of the service's store that a gRPC admin call
// asked for (ResetLimit; the store API's Reset, SetOverride and
// ClearOverride) with its audit row (rulesdb.Record): the actor is the
// call's token (grpcauth), or "grpc:unauthenticated" under
// --grpc-auth=off, and the row carries the call's request id.
func (a *admin) record(ctx context.Context, action, target string, before, after any, apply func(context.Context) error) error {
	d := a.src.DB()
	if d == nil {
		return errNoDatabase
	}
	actor := "grpc:unauthenticated"
	if p, ok := adminauth.PrincipalFrom(ctx); ok && p.Name != "" {
		actor = p.Name
	}
	if rulesdb.RequestID(ctx) == "" {
		ctx = rulesdb.WithRequestID(ctx, requestid.New())
	}
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	err := d.Record(ctx, actor, action, target, before, after, apply)
	if errors.Is(err, rulesdb.ErrNotRecorded) {
		a.log.ErrorContext(ctx, "admin change made without its audit row; the client is told to retry",
			"actor", actor, "action", action, "target", target, "request_id", rulesdb.RequestID(ctx), "error", err)
	}
	return err
}

// storeRecorder is record for the store API's changes.
func (a *admin) storeRecorder(ctx context.Context, c remotestore.Change, apply func(context.Context) error) error {
	return a.record(ctx, c.Action, c.Target, c.Before, c.After, apply)
}

// resetRecorder is record for the native API's ResetLimit.
func (a *admin) resetRecorder(ctx context.Context, r grpcapi.Reset, apply func(context.Context) error) error {
	return a.record(ctx, rulesdb.ActionLimitReset, r.Target, nil, r.After, apply)
}
