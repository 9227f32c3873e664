package adminauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
	"github.com/sluicehq/sluice/service/internal/problem"
	"github.com/sluicehq/sluice/service/internal/requestid"
	"github.com/sluicehq/sluice/service/rules"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// The names of the admin API's rate-limit policies, as RateLimit-Policy
// and the problem of a 429 name them.
// No rule may take them (rules.Reserved): a rule's counters would share
// their keys in the store.
const (
	PolicyRead  = rules.PolicyAdminRead
	PolicyWrite = rules.PolicyAdminWrite
)

// Default limits per token, the seed's figures.
const (
	DefaultReadsPerMinute  = 1000
	DefaultWritesPerMinute = 100
	// DefaultCacheTTL is how long an authentication result is remembered:
	// a revoked token keeps working on an instance for at most this long.
	DefaultCacheTTL = 5 * time.Second
)

// maxCached bounds the authentication cache (entries); full, it drops its
// expired entries, then everything.
const maxCached = 10000

// maxAuthorization is the longest Authorization header looked at: a token
// is far shorter, so a longer one is refused without a lookup.
const maxAuthorization = 256

// Principal is the caller of an admin request: its token's name (the audit
// actor) and scope.
type Principal struct {
	Name  string
	Scope rulesdb.Scope
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p, the authenticated caller of a
// request another front door took (ratelimitd's gRPC admin calls):
// PrincipalFrom returns it.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the Principal of the request whose context is ctx,
// set by Wrap once the token is authenticated.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Options configures New. The zero value is the defaults.
type Options struct {
	// ReadsPerMinute and WritesPerMinute are each token's limits on reads
	// (GET, HEAD) and writes (every other method), counted by a sliding
	// window (counter) of one minute, so a token makes about that many in
	// any minute, not twice as many across a window's edge; 0 means the
	// defaults, 1000 and 100; at most 1048576 (the window counter's bound).
	ReadsPerMinute, WritesPerMinute int64
	// CacheTTL is how long an authentication result (a token's principal,
	// or a refusal) is kept in memory, so the database is not read on
	// every request: a revocation takes up to this long to reach an
	// instance. 0 means DefaultCacheTTL; negative disables the cache.
	CacheTTL time.Duration
	// Logger receives the failures that clients are not told about (the
	// database's, the store's). nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock of the cache; nil: time.Now.
	Now func() time.Time
	// OnFailure, when set, is told of each failed authentication (of the
	// admin API, the admin page's login and the gRPC admin calls alike):
	// FailureInvalid or FailureThrottled. A request that presents no
	// token is not an authentication and is not told. It is called on the
	// request's goroutine: it must be quick and safe for concurrent use.
	OnFailure func(reason string)
}

// The reasons given to Options.OnFailure.
const (
	// FailureInvalid: the secret is unknown, revoked or malformed.
	FailureInvalid = "invalid"
	// FailureThrottled: the secret was refused unread, its client having
	// failed too often (ErrTooManyFailures).
	FailureThrottled = "throttled"
)

// Auth authenticates, authorises and rate-limits admin requests: see Wrap.
// It is safe for concurrent use.
type Auth struct {
	db      *rulesdb.DB
	limiter *core.Limiter
	log     *slog.Logger
	now     func() time.Time
	ttl     time.Duration

	onFailure func(reason string)

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cached
	fails failures
}

// cached is one remembered authentication result.
type cached struct {
	p       Principal
	ok      bool // false: refused
	expires time.Time
}

// New returns the Auth of the tokens in db, counting each token's requests
// in store (the service's: Redis in a fleet, so the limits hold across
// instances).
func New(db *rulesdb.DB, store core.Store, o Options) (*Auth, error) {
	switch {
	case db == nil:
		return nil, errors.New("adminauth: db: required")
	case store == nil:
		return nil, errors.New("adminauth: store: required")
	case o.ReadsPerMinute < 0:
		return nil, fmt.Errorf("adminauth: ReadsPerMinute: must be >= 0, got %d", o.ReadsPerMinute)
	case o.WritesPerMinute < 0:
		return nil, fmt.Errorf("adminauth: WritesPerMinute: must be >= 0, got %d", o.WritesPerMinute)
	}
	if o.ReadsPerMinute == 0 {
		o.ReadsPerMinute = DefaultReadsPerMinute
	}
	if o.WritesPerMinute == 0 {
		o.WritesPerMinute = DefaultWritesPerMinute
	}
	if o.CacheTTL == 0 {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	reads := core.PerMinute(o.ReadsPerMinute).WithAlgorithm(core.SlidingWindowCounter)
	if err := reads.Validate(); err != nil {
		return nil, fmt.Errorf("adminauth: ReadsPerMinute: %w", err)
	}
	writes := core.PerMinute(o.WritesPerMinute).WithAlgorithm(core.SlidingWindowCounter)
	if err := writes.Validate(); err != nil {
		return nil, fmt.Errorf("adminauth: WritesPerMinute: %w", err)
	}
	// The identity is given by each call (CheckGroup), never by a Key.
	none := keyfunc.Const("admin")
	l, err := core.NewLimiter(store, []core.Policy{
		{Name: PolicyRead, Key: none, Limit: reads},
		{Name: PolicyWrite, Key: none, Limit: writes},
	})
	if err != nil {
		return nil, fmt.Errorf("adminauth: limits: %w", err)
	}
	return &Auth{db: db, limiter: l, log: o.Logger, now: o.Now, ttl: o.CacheTTL, onFailure: o.OnFailure,
		cache: map[[sha256.Size]byte]cached{}, fails: failures{m: map[netip.Prefix]*budget{}}}, nil
}

// Authenticate returns the Principal of the token secret: the check Wrap
// makes of a bearer token, for callers that take the secret another way
// (the admin page's login). An unknown or revoked secret is
// rulesdb.ErrUnauthorized; any other error is the database's, not to be
// shown to a client. Under Wrap, a secret not in the cache from a client
// whose authentications failed too often is ErrTooManyFailures, with no
// database lookup. Options.OnFailure is told of both refusals.
func (a *Auth) Authenticate(ctx context.Context, secret string) (Principal, error) {
	p, err := a.authenticate(ctx, secret)
	if a.onFailure != nil {
		switch {
		case errors.Is(err, rulesdb.ErrUnauthorized):
			a.onFailure(FailureInvalid)
		case errors.Is(err, ErrTooManyFailures):
			a.onFailure(FailureThrottled)
		}
	}
	return p, err
}

func (a *Auth) authenticate(ctx context.Context, secret string) (Principal, error) {
	if secret == "" || len(secret) > maxAuthorization {
		return Principal{}, rulesdb.ErrUnauthorized
	}
	sum := sha256.Sum256([]byte(secret))
	now := a.now()
	known := false // a token that was valid when last looked up
	if a.ttl > 0 {
		a.mu.Lock()
		c, hit := a.cache[sum]
		a.mu.Unlock()
		if hit && now.Before(c.expires) {
			if !c.ok {
				return Principal{}, rulesdb.ErrUnauthorized
			}
			return c.p, nil
		}
		known = hit && c.ok
	}
	// A client over its failure budget (behind a proxy: everyone behind
	// it) still gets the tokens it was using looked up again.
	client := clientOf(ctx)
	if ok, _ := a.fails.allowed(client, now); !ok && !known {
		return Principal{}, ErrTooManyFailures
	}
	t, err := a.db.Authenticate(ctx, secret)
	if err != nil && !errors.Is(err, rulesdb.ErrUnauthorized) {
		return Principal{}, err
	}
	if err != nil {
		a.fails.failed(client, now)
	}
	p := Principal{Name: t.Name, Scope: t.Scope}
	if a.ttl > 0 {
		a.mu.Lock()
		if len(a.cache) >= maxCached {
			for k, c := range a.cache {
				if !now.Before(c.expires) {
					delete(a.cache, k)
				}
			}
			if len(a.cache) >= maxCached {
				clear(a.cache)
			}
		}
		a.cache[sum] = cached{p: p, ok: err == nil, expires: now.Add(a.ttl)}
		a.mu.Unlock()
	}
	if err != nil {
		return Principal{}, err
	}
	return p, nil
}

// Wrap returns h behind the admin API's checks, in order:
//
//   - a request id: X-Request-Id when it is 1 to 128 of A-Z a-z 0-9 - _ .
//     : (else a new random one), echoed in the response and recorded in
//     the audit rows of the request's writes (rulesdb.WithRequestID);
//   - a bearer token (Authorization: Bearer SECRET): none, another
//     scheme, an unknown or a revoked token is 401 with
//     WWW-Authenticate: Bearer realm="ratelimitd" (the answer never says
//     whether a token exists); a client (IPv4 address, IPv6 /64) whose
//     secrets failed more than 20 times in a minute gets 429 with
//     Retry-After for secrets not in the cache, which then cost no
//     database lookup;
//   - its scope: GET and HEAD need read, every other method write (403);
//   - the token's rate limit (admin_read or admin_write: a write counts
//     against writes only), with the standard RateLimit, RateLimit-Policy
//     and X-RateLimit-* headers, and 429 with Retry-After when exhausted;
//     a store failure fails closed with 503;
//   - on POST with an Idempotency-Key, the key (see rulesdb.BeginIdempotent):
//     a replay gets the stored response with Idempotent-Replayed: true, the
//     same key with another method, path, query or body 422, one still in flight
//     409; its handler runs under a deadline of 50 s, over before the key
//     could be taken as abandoned (rulesdb.IdempotencyAbandoned).
//
// h then runs with the Principal in its context (PrincipalFrom). Every
// refusal is RFC 9457 application/problem+json, with no internal error
// text.
func (a *Auth) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !requestid.Valid(id) {
			id = requestid.New()
		}
		w.Header().Set("X-Request-Id", id)
		ctx := rulesdb.WithRequestID(r.Context(), id)

		secret, ok := BearerToken(r.Header.Values("Authorization"))
		if !ok {
			unauthorized(w, r, "")
			return
		}
		p, err := a.Authenticate(WithClient(ctx, r.RemoteAddr), secret)
		switch {
		case errors.Is(err, rulesdb.ErrUnauthorized):
			unauthorized(w, r, "invalid_token")
			return
		case errors.Is(err, ErrTooManyFailures):
			_, retry := a.fails.allowed(clientOf(WithClient(ctx, r.RemoteAddr)), a.now())
			w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(max(retry, time.Second).Seconds())), 10))
			writeProblem(w, r, http.StatusTooManyRequests, "Too Many Requests", "too many failed authentications from this client; retry later")
			return
		case err != nil:
			a.log.ErrorContext(ctx, "admin: authenticating a token", "request_id", id, "err", err)
			writeProblem(w, r, http.StatusServiceUnavailable, "Service Unavailable", "the token could not be checked; retry later")
			return
		}
		need, policy := rulesdb.ScopeWrite, PolicyWrite
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			need, policy = rulesdb.ScopeRead, PolicyRead
		}
		if !p.Scope.Allows(need) {
			writeProblem(w, r, http.StatusForbidden, "Forbidden", fmt.Sprintf("this token's scope is %s; %s needs scope %s", p.Scope, r.Method, need))
			return
		}
		if !a.limit(ctx, w, r, policy, p.Name) {
			return
		}
		ctx = WithPrincipal(ctx, p)
		r = r.WithContext(ctx)
		if r.Method == http.MethodPost && len(r.Header.Values("Idempotency-Key")) > 0 {
			a.idempotent(w, r, p, h)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Limit counts one request of p against the token's limit policy
// (PolicyRead or PolicyWrite), the same count Wrap keeps: a caller taking
// requests another way (ratelimitd's gRPC admin calls) shares the token's
// limits with the admin API and page. The Decision says whether the
// request is admitted and carries what the rate-limit headers need; an
// error is the store's (refuse the request: fail closed) or an unknown
// policy's.
func (a *Auth) Limit(ctx context.Context, p Principal, policy string) (core.Decision, error) {
	if policy != PolicyRead && policy != PolicyWrite {
		return core.Decision{}, fmt.Errorf("adminauth: policy: want %s or %s, got %q", PolicyRead, PolicyWrite, policy)
	}
	return a.limiter.CheckGroup(ctx, []core.GroupOp{{Policy: policy, Identity: "token:" + p.Name, Cost: 1}})
}

// limit counts the request against the token's policy and sets the
// rate-limit headers; false: the request was answered (429, or 503 when
// the store failed).
func (a *Auth) limit(ctx context.Context, w http.ResponseWriter, r *http.Request, policy, name string) bool {
	d, err := a.Limit(ctx, Principal{Name: name}, policy)
	if err != nil {
		a.log.ErrorContext(ctx, "admin: rate limit store failed; refusing (fail closed)", "request_id", rulesdb.RequestID(ctx), "policy", policy, "err", err)
		writeProblem(w, r, http.StatusServiceUnavailable, "Service Unavailable", "the rate limit could not be checked; retry later")
		return false
	}
	at := time.Now()
	if len(d.Results) > 0 && d.Results[0].At != 0 {
		at = time.UnixMicro(d.Results[0].At)
	}
	f := ratelimitfields.Config{}.Format(&d, at)
	for field, v := range f.All() {
		w.Header().Set(field.String(), v)
	}
	if d.Allowed {
		return true
	}
	w.Header().Set("Content-Type", ratelimitfields.ProblemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	if r.Method != http.MethodHead {
		_, _ = w.Write(ratelimitfields.Problem(&d))
	}
	return false
}

// BearerToken returns the credential of the one Authorization value in
// values (an HTTP header's values, or gRPC's authorization metadata), if it
// is the Bearer scheme (any case) with a token68 credential of sane length
// (at most 256 bytes in all). Two values, another scheme or odd bytes give
// false: every front door of the admin plane reads a token the same way.
func BearerToken(values []string) (string, bool) {
	if len(values) != 1 || len(values[0]) > maxAuthorization {
		return "", false
	}
	scheme, cred, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimLeft(cred, " ")
	if cred == "" {
		return "", false
	}
	for i := 0; i < len(cred); i++ {
		c := cred[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/=", c) >= 0) {
			return "", false
		}
	}
	return cred, true
}

// writeProblem answers status as application/problem+json in the admin
// API's shape.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, title, detail string, errs ...core.FieldError) {
	problem.Write(w, r, status, problem.New(r, status, title, detail, errs...))
}

// unauthorized answers 401 with the Bearer challenge; errCode is RFC 6750's
// error attribute ("" when no credentials were given).
func unauthorized(w http.ResponseWriter, r *http.Request, errCode string) {
	ch := `Bearer realm="ratelimitd"`
	if errCode != "" {
		ch += `, error="` + errCode + `"`
	}
	w.Header().Set("WWW-Authenticate", ch)
	writeProblem(w, r, http.StatusUnauthorized, "Unauthorized", "a valid bearer token is required (Authorization: Bearer TOKEN)")
}
