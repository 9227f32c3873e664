package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/rawtext"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Prefix is the path every resource of the API is under.
const Prefix = "/api/v1"

// Paths returns the paths to mount the handler at (a ServeMux pattern
// each), as ratelimitd does.
func Paths() []string {
	return []string{Prefix + "/rules", Prefix + "/rules/", Prefix + "/users/", Prefix + "/audit", Prefix + "/audit/"}
}

// Options configure the handler New returns.
type Options struct {
	// DB is the rules database the API reads and writes. Required.
	DB *rulesdb.DB
	// Engine is the engine deciding the service's checks: a user's limits
	// are read from its rules in force and its store. Required.
	Engine *engine.Engine
	// Auth guards every request (bearer token, scope, per-token rate
	// limits, request id, Idempotency-Key); the actor of a write is its
	// token's name. Required by New.
	Auth *adminauth.Auth
	// Logger receives database failures (never sent to clients); nil means
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock of override expiries; nil means time.Now.
	Now func() time.Time
	// Sync, when set, puts every write in force on this instance before
	// the write is answered: the rules source the engine follows
	// (rulesdb.Source), told the revision the write committed. A write
	// committed but not in force in time, or refused by the engine, is
	// answered 503 saying so (see the package documentation). Nil: a write
	// is answered once committed, and the engine follows on its own.
	Sync rulesdb.Syncer
}

// MaxOverrideTTL bounds an override's lifetime: its expiry is at most this
// far in the future.
const MaxOverrideTTL = 30 * 24 * time.Hour

// api serves the admin API.
type api struct {
	db   *rulesdb.DB
	eng  *engine.Engine
	log  *slog.Logger
	now  func() time.Time
	sync rulesdb.Syncer
	// principal names the caller of a request, the actor of its writes.
	principal func(context.Context) (string, bool)
}

// New returns the admin API's handler, serving the resources under Prefix
// (see the package documentation) behind o.Auth.Wrap.
func New(o Options) (http.Handler, error) {
	a, err := newAPI(o)
	if err != nil {
		return nil, err
	}
	if o.Auth == nil {
		return nil, errors.New("adminapi: Options.Auth: required")
	}
	return o.Auth.Wrap(a.routes()), nil
}

// NewAuthenticated returns the admin API's handler for requests a front
// door of ratelimitd's own has authenticated (the admin page, whose
// session's token went through Auth.Wrap): the resources, checks, writes
// and audit rows of New, without Auth.Wrap's (no bearer token is read, no
// rate limit counted again, no Idempotency-Key taken). Each request's
// context must carry its caller's adminauth.Principal (the actor of its
// writes) and its request id (rulesdb.WithRequestID, recorded in the audit
// rows): a request without a principal is answered 401, and one that is
// not GET or HEAD from a principal without the write scope 403, with
// nothing read or written. o.Auth is not used.
func NewAuthenticated(o Options) (http.Handler, error) {
	o.Auth = nil
	a, err := newAPI(o)
	if err != nil {
		return nil, err
	}
	routes := a.routes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := adminauth.PrincipalFrom(r.Context())
		need := rulesdb.ScopeWrite
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			need = rulesdb.ScopeRead
		}
		switch {
		case !ok || p.Name == "":
			writeProblem(w, r, fail(http.StatusUnauthorized, "Authorization", "no authenticated caller"))
		case !p.Scope.Allows(need):
			writeProblem(w, r, fail(http.StatusForbidden, "", "this token's scope is %s; %s needs scope %s", p.Scope, clip(r.Method), need))
		default:
			routes.ServeHTTP(w, r)
		}
	}), nil
}

func newAPI(o Options) (*api, error) {
	if o.DB == nil {
		return nil, errors.New("adminapi: Options.DB: required")
	}
	if o.Engine == nil {
		return nil, errors.New("adminapi: Options.Engine: required")
	}
	a := &api{db: o.DB, eng: o.Engine, log: o.Logger, now: o.Now, sync: o.Sync, principal: principalFrom}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// principalFrom is the actor of a request's writes: the name of the
// token adminauth authenticated.
func principalFrom(ctx context.Context) (string, bool) {
	p, ok := adminauth.PrincipalFrom(ctx)
	return p.Name, ok && p.Name != ""
}

// methods maps the methods of one resource to their handlers.
type methods map[string]func(http.ResponseWriter, *http.Request) *apiError

// route is one resource: its pattern under Prefix and its methods.
type route struct {
	pattern string
	methods methods
}

// table lists every resource of the API (routes serves them; the tests
// derive what they send from it).
func (a *api) table() []route {
	return []route{
		{"/rules", methods{http.MethodGet: a.listRules, http.MethodPost: a.createRule}},
		{"/rules/{id}", methods{http.MethodGet: a.getRule, http.MethodPut: a.putRule, http.MethodDelete: a.deleteRule}},
		{"/users/{id}/limits", methods{http.MethodGet: a.limits}},
		{"/users/{id}/tier", methods{http.MethodPut: a.putTier}},
		{"/users/{id}/override", methods{http.MethodGet: a.listOverrides, http.MethodPost: a.postOverride}},
		{"/users/{id}/override/{rule}", methods{http.MethodDelete: a.deleteOverride}},
		{"/audit", methods{http.MethodGet: a.audit}},
	}
}

// routes builds the mux of every resource; any other path is a 404 and
// any other method a 405 with Allow, both as problem+json.
func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, ms methods) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete} {
			if ms[m] != nil || m == http.MethodHead && ms[http.MethodGet] != nil {
				allow = append(allow, m)
			}
		}
		mux.HandleFunc(Prefix+pattern, func(w http.ResponseWriter, r *http.Request) {
			m := r.Method
			if m == http.MethodHead {
				m = http.MethodGet
			}
			h := ms[m]
			if h == nil {
				w.Header().Set("Allow", strings.Join(allow, ", "))
				writeProblem(w, r, fail(http.StatusMethodNotAllowed, "method", "%s is not served here (allowed: %s)", clip(r.Method), strings.Join(allow, ", ")))
				return
			}
			// Every path wildcard and query parameter is valid UTF-8, or
			// the request is refused naming it before anything is read.
			if inv := textError(r); inv != nil {
				writeProblem(w, r, bad(clip(inv.Field), "%s", inv.Message))
				return
			}
			if e := h(w, r); e != nil {
				writeProblem(w, r, e)
			}
		})
	}
	for _, rt := range a.table() {
		handle(rt.pattern, rt.methods)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, fail(http.StatusNotFound, "path", "no resource %q", clip(r.URL.Path)))
	})
	return mux
}

// textError is the first path wildcard or query parameter of r that is
// not valid UTF-8 (nil if none).
func textError(r *http.Request) *core.FieldError {
	if inv := rawtext.PathValues(r); inv != nil {
		return inv
	}
	return rawtext.Query(r)
}

// actor returns the name of the caller, the actor of a write.
func (a *api) actor(r *http.Request) (string, *apiError) {
	name, ok := a.principal(r.Context())
	if !ok {
		return "", fail(http.StatusUnauthorized, "Authorization", "no authenticated caller")
	}
	return name, nil
}

// failed is the answer to an unexpected error of the database: logged,
// answered 503 with a generic detail.
func (a *api) failed(r *http.Request, op string, err error) *apiError {
	if r.Context().Err() == nil {
		a.log.LogAttrs(r.Context(), slog.LevelError, "adminapi: database failed",
			slog.String("op", op), slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	return unavailable
}

// inForce waits until the revision a write committed is in force on this
// instance (Options.Sync); nil when it is, or when there is no Sync. A
// write that is committed but not in force is a 503 naming both
// revisions, and logged.
func (a *api) inForce(r *http.Request, revision int64) *apiError {
	if a.sync == nil {
		return nil
	}
	err := a.sync.Sync(r.Context(), revision)
	if err == nil {
		return nil
	}
	var nf *rulesdb.NotInForceError
	if !errors.As(err, &nf) {
		return a.failed(r, "sync", err)
	}
	a.log.LogAttrs(r.Context(), slog.LevelError, "adminapi: a committed change is not in force on this instance",
		slog.String("path", r.URL.Path), slog.Int64("revision", revision), slog.Int64("revision_in_force", nf.InForce),
		slog.Bool("refused", nf.Refused), slog.Any("error", err))
	return notInForce(nf)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v) // the answers' types always marshal
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// locationOf is the path of a resource under Prefix.
func locationOf(format string, args ...any) string { return Prefix + fmt.Sprintf(format, args...) }
