package adminui

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/service/adminapi"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/rawtext"
	"github.com/sluicehq/sluice/service/internal/requestid"
	"github.com/sluicehq/sluice/service/internal/traffic"
	"github.com/sluicehq/sluice/service/rulesdb"
)

//go:embed templates
var files embed.FS

// cookieName names the session cookie.
const cookieName = "sluice_admin"

// maxForm bounds a POSTed form, in bytes.
const maxForm = 64 << 10

// Options are what the admin page shows and changes.
type Options struct {
	// DB is the rules database: rules are listed and saved there, the
	// audit trail is read from it. Required.
	DB *rulesdb.DB
	// Engine is the engine deciding checks: the rules and overrides in
	// force and a caller's usage come from it. Required.
	Engine *engine.Engine
	// Auth checks the token given at sign-in, and again on every request
	// of the session. Required.
	Auth *adminauth.Auth
	// Recent, when set, is the engine's observer of warned and throttled
	// callers (engine.WithObserver): the rules page counts them and
	// /admin/recent lists them. Nil shows none.
	Recent *engine.Recent
	// Logger receives what fails inside (never shown to the browser);
	// nil means slog.Default().
	Logger *slog.Logger
	// Traffic, when set, is the engine's observer counting its decisions
	// (engine.WithObserver): /admin/traffic charts them. Nil: no page.
	Traffic *traffic.Recorder
	// Fleet, when set, reads (and publishes) the counts of the instances
	// sharing this one's Redis: the traffic page sums them.
	Fleet *traffic.Fleet
	// Sync, when set, puts a saved rule in force on this instance before
	// the page answers (the engine's rules source, rulesdb.Source): the
	// page then says the rule is in force here, or why it is not. Nil:
	// the page answers once the rule is stored.
	Sync rulesdb.Syncer
}

// handler serves the admin page.
type handler struct {
	db     *rulesdb.DB
	eng    *engine.Engine
	auth   *adminauth.Auth
	recent *engine.Recent
	log    *slog.Logger
	now    func() time.Time
	sync   rulesdb.Syncer

	// api is the admin API serving the page's forms (see write.go).
	api http.Handler

	traffic trafficDeps

	sess  *sessions
	pages map[string]*template.Template
	css   template.CSS
	csp   string
	mux   *http.ServeMux
}

// New returns the handler of the admin page, serving every path under
// /admin/ (mount it at "/admin/"). It fails when a required option is
// missing.
func New(o Options) (http.Handler, error) {
	switch {
	case o.DB == nil:
		return nil, errors.New("adminui: Options.DB: required")
	case o.Engine == nil:
		return nil, errors.New("adminui: Options.Engine: required")
	case o.Auth == nil:
		return nil, errors.New("adminui: Options.Auth: required")
	}
	h := &handler{db: o.DB, eng: o.Engine, auth: o.Auth, recent: o.Recent, log: o.Logger, now: time.Now, sync: o.Sync, sess: newSessions(maxSessions),
		traffic: trafficDeps{rec: o.Traffic, fleet: o.Fleet}}
	if h.log == nil {
		h.log = slog.Default()
	}
	api, err := adminapi.NewAuthenticated(adminapi.Options{DB: o.DB, Engine: o.Engine, Logger: h.log})
	if err != nil {
		return nil, fmt.Errorf("adminui: the admin API: %w", err)
	}
	h.api = api
	css, err := files.ReadFile("templates/style.css")
	if err != nil {
		return nil, fmt.Errorf("adminui: stylesheet: %w", err)
	}
	h.css = template.CSS(css)
	sum := sha256.Sum256(css)
	// The page's only resource is its inline stylesheet, allowed by hash;
	// forms post to the page itself.
	h.csp = "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	funcs := template.FuncMap{"fmtTime": fmtTime}
	h.pages = map[string]*template.Template{}
	for _, name := range []string{"login", "rules", "rule", "users", "overrides", "audit", "recent", "message", "rulenew", "ruledelete", "traffic", "callers"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/writeparts.html", "templates/part_*.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("adminui: template %s: %w", name, err)
		}
		h.pages[name] = t
	}
	m := http.NewServeMux()
	for _, p := range h.table() {
		m.HandleFunc(p.pattern, h.textChecked(p.serve))
	}
	h.mux = m
	return h, nil
}

// page is one route of the admin page: its pattern, handler, and the
// fields of the form it takes (POST).
type page struct {
	pattern string
	serve   http.HandlerFunc
	form    []string
}

// table lists every route of the page (New serves them; the tests derive
// what they send from it).
func (h *handler) table() []page {
	return append([]page{
		{pattern: "GET /admin/login", serve: h.loginForm},
		{pattern: "POST /admin/login", serve: h.login, form: []string{"token"}},
		{pattern: "POST /admin/logout", serve: h.sessioned(h.logout), form: []string{"csrf"}},
		{pattern: "GET /admin/{$}", serve: h.authed(h.rules)},
		{pattern: "GET /admin/rules/{id}", serve: h.authed(h.rule)},
		{pattern: "POST /admin/rules/{id}", serve: h.authed(h.saveRule), form: append(slices.Clone(formFields), "etag", "csrf")},
		{pattern: "GET /admin/users", serve: h.authed(h.users)},
		{pattern: "GET /admin/callers", serve: h.authed(h.callers)},
		{pattern: "GET /admin/overrides", serve: h.authed(h.overrides)},
		{pattern: "GET /admin/audit", serve: h.authed(h.audit)},
		{pattern: "GET /admin/recent", serve: h.authed(h.recentPage)},
		{pattern: "GET /admin/traffic", serve: h.authed(h.trafficPage)},
		{pattern: "GET /admin/traffic/{id}", serve: h.authed(h.trafficRule)},
		{pattern: "/admin/", serve: h.authed(h.notFound)},
	}, h.writeTable()...)
}

// textChecked answers 400, naming the field, a request whose path
// wildcards, query or form (a POST's, which it reads: an unreadable or
// oversized form is 400 too) hold text that is not valid UTF-8, before
// next reads any of it.
func (h *handler) textChecked(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		inv := rawtext.PathValues(r)
		if inv == nil {
			inv = rawtext.Query(r)
		}
		if inv == nil && r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				h.message(w, r, nil, http.StatusBadRequest, "Bad request: the form could not be read")
				return
			}
			inv = rawtext.Values(r.PostForm, "form")
		}
		if inv != nil {
			h.message(w, r, nil, http.StatusBadRequest, "Bad request: "+inv.Error())
			return
		}
		next(w, r)
	}
}

// ServeHTTP sets the security headers of every response and serves r.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", h.csp)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	// Every request gets an id of its own (never one the client sends: the
	// page has no API clients), echoed and recorded in the audit rows it
	// writes.
	id := requestid.New()
	hd.Set("X-Request-Id", id)
	r = r.WithContext(rulesdb.WithRequestID(r.Context(), id))
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if !sameOrigin(r) {
			h.message(w, r, nil, http.StatusForbidden, "Forbidden: the form was not sent from this page")
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// sameOrigin reports whether a POST comes from the page's own origin.
// Browsers send Sec-Fetch-Site with every request; it must say
// same-origin. Without it, an Origin header naming another origin is
// refused. (Under Referrer-Policy no-referrer a browser sends "Origin:
// null" with its form posts, so Origin alone cannot tell.) SameSite=Strict
// and the CSRF token are the other locks.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host && (u.Scheme == "https") == (r.TLS != nil)
}

// req is an authenticated request: its session and principal.
type req struct {
	s   *session
	who adminauth.Principal
}

func (q *req) canWrite() bool { return q.who.Scope == rulesdb.ScopeWrite }

// session returns the live session of r's cookie, or nil.
func (h *handler) session(r *http.Request) *session {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	return h.sess.get(c.Value, h.now())
}

// checkForm reads a POSTed form and checks its CSRF token against s's; it
// answers (and returns false) when either fails.
func (h *handler) checkForm(w http.ResponseWriter, r *http.Request, q *req) bool {
	if err := r.ParseForm(); err != nil {
		h.message(w, r, q, http.StatusBadRequest, "Bad request: the form could not be read")
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(q.s.csrf)) != 1 {
		h.message(w, r, q, http.StatusForbidden, "Forbidden: the form's security token is missing or stale; reload the page and try again")
		return false
	}
	return true
}

// authed wraps a page that needs a session. Without a live session the
// browser is sent to the sign-in form. With one, the request goes through
// adminauth's Wrap with the session's token as its bearer token, as an
// admin API call would: the token is checked (refused: the session ends),
// its scope (a POST needs write) and its per-token rate limit (reads and
// writes, with the standard headers) apply; Wrap's refusals are answered
// as pages. A POST must then carry the session's CSRF token.
func (h *handler) authed(next func(http.ResponseWriter, *http.Request, *req)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := h.session(r)
		if s == nil {
			http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
			return
		}
		pw := &pageWriter{ResponseWriter: w}
		inner := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			pw.through = true
			who, _ := adminauth.PrincipalFrom(r.Context())
			q := &req{s: s, who: who}
			if r.Method == http.MethodPost && !h.checkForm(w, r, q) {
				return
			}
			next(w, r, q)
		})
		ar := r.Clone(r.Context())
		ar.Header.Set("Authorization", "Bearer "+s.secret)
		ar.Header.Set("X-Request-Id", rulesdb.RequestID(r.Context()))
		ar.Header.Del("Idempotency-Key")
		h.auth.Wrap(inner).ServeHTTP(pw, ar)
		if pw.through {
			return
		}
		// Wrap refused the request: its problem+json is for API clients.
		hd := w.Header()
		hd.Del("Content-Type")
		hd.Del("WWW-Authenticate")
		switch pw.status {
		case http.StatusUnauthorized: // unknown or revoked token
			h.sess.end(s.id)
			clearCookie(w, r)
			http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
		case http.StatusForbidden:
			h.message(w, r, nil, http.StatusForbidden, "Forbidden: your token has the read scope; a change needs the write scope")
		case http.StatusTooManyRequests:
			h.message(w, r, nil, http.StatusTooManyRequests, "Too many requests: your token's admin rate limit is spent; retry in "+retryText(hd.Get("Retry-After")))
		default:
			h.message(w, r, nil, http.StatusServiceUnavailable, "Service unavailable: the token could not be checked; try again shortly")
		}
	}
}

// retryText is a Retry-After of delay-seconds in words ("1 second",
// "30 seconds"); anything else as it is.
func retryText(v string) string {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return v
	}
	return string(fieldfmt.AppendSeconds(nil, n))
}

// pageWriter holds back what adminauth's Wrap writes when it refuses a
// request (its headers, such as the rate-limit fields, stay), so that the
// page answers instead; once the page's handler runs (through), nothing
// goes through it: the handler writes to the response itself.
type pageWriter struct {
	http.ResponseWriter
	through bool
	status  int
}

func (p *pageWriter) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}

func (p *pageWriter) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}

// sessioned wraps a POST that needs only a session and its CSRF token, not
// a valid token (signing out).
func (h *handler) sessioned(next func(http.ResponseWriter, *http.Request, *req)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := h.session(r)
		if s == nil {
			http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
			return
		}
		q := &req{s: s}
		if h.checkForm(w, r, q) {
			next(w, r, q)
		}
	}
}

func (h *handler) setCookie(w http.ResponseWriter, r *http.Request, s *session) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: s.id, Path: "/admin/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionLife / time.Second),
	})
}

func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/admin/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

// view is what every page's template gets.
type view struct {
	Title, Nav    string
	CSS           template.CSS
	User, Scope   string
	CanWrite      bool
	CSRF          string
	Notice, Error string
	Data          any
}

// render executes page into a buffer and sends it with status; a template
// failure is logged and answered 500.
func (h *handler) render(w http.ResponseWriter, r *http.Request, q *req, status int, page string, v *view) {
	v.CSS = h.css
	if q != nil {
		v.User, v.Scope, v.CanWrite, v.CSRF = q.who.Name, string(q.who.Scope), q.canWrite(), q.s.csrf
	}
	var b bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&b, "layout", v); err != nil {
		h.log.Error("adminui: template", "page", page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b.Bytes())
	}
}

// message answers status with a page saying title.
func (h *handler) message(w http.ResponseWriter, r *http.Request, q *req, status int, title string) {
	h.render(w, r, q, status, "message", &view{Title: title})
}

// failed logs a store failure and answers 503 without its text.
func (h *handler) failed(w http.ResponseWriter, r *http.Request, q *req, what string, err error) {
	h.log.ErrorContext(r.Context(), "adminui: "+what, "err", err)
	h.message(w, r, q, http.StatusServiceUnavailable, "Service unavailable: "+what+" failed; try again shortly")
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request, q *req) {
	h.message(w, r, q, http.StatusNotFound, "Not found")
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// loginForm shows the sign-in form (or the rules to a live session).
func (h *handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if h.session(r) != nil {
		http.Redirect(w, r, "/admin/", http.StatusSeeOther)
		return
	}
	h.render(w, r, nil, http.StatusOK, "login", &view{Title: "Sign in"})
}

// login checks the token of the sign-in form and starts a session.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		h.render(w, r, nil, http.StatusBadRequest, "login", &view{Title: "Sign in", Error: "The form could not be read."})
		return
	}
	secret := r.PostFormValue("token")
	if secret == "" {
		h.render(w, r, nil, http.StatusBadRequest, "login", &view{Title: "Sign in", Error: "token: required."})
		return
	}
	if _, err := h.auth.Authenticate(adminauth.WithClient(r.Context(), r.RemoteAddr), secret); err != nil {
		if errors.Is(err, rulesdb.ErrUnauthorized) {
			h.render(w, r, nil, http.StatusUnauthorized, "login", &view{Title: "Sign in", Error: "That token is not valid (unknown or revoked)."})
			return
		}
		if errors.Is(err, adminauth.ErrTooManyFailures) {
			h.render(w, r, nil, http.StatusTooManyRequests, "login", &view{Title: "Sign in", Error: "Too many failed sign-ins from your address; try again in a minute."})
			return
		}
		h.log.ErrorContext(r.Context(), "adminui: sign-in", "err", err)
		h.render(w, r, nil, http.StatusServiceUnavailable, "login", &view{Title: "Sign in", Error: "The token could not be checked; try again shortly."})
		return
	}
	if c, err := r.Cookie(cookieName); err == nil {
		h.sess.end(c.Value) // a new session id at every sign-in
	}
	h.setCookie(w, r, h.sess.create(secret, h.now()))
	http.Redirect(w, r, "/admin/", http.StatusSeeOther)
}

// logout ends the session.
func (h *handler) logout(w http.ResponseWriter, r *http.Request, q *req) {
	h.sess.end(q.s.id)
	clearCookie(w, r)
	http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
}
