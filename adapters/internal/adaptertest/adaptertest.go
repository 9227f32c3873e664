// Package adaptertest is the conformance suite of the sluice adapters: the
// behaviour every adapter (net/http, Gin, Echo, Fiber, gRPC) must share,
// written once and run against each through a Harness.
//
// A harness maps the suite's Setup onto the adapter's options and its
// Request and Response onto the framework's; it is the only code an
// adapter's conformance_test.go holds. What is left in an adapter's other
// tests is its framework's own (router path semantics, error paths,
// request views, buffer reuse). The cases that need paths, client
// addresses or response bodies run for HTTP harnesses only (those with
// Routers); the others run for gRPC too, which answers with metadata and
// a status (Response.RPC).
package adaptertest

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// ErrDown is the error of a Store whose backend is down (FlakyStore).
var ErrDown = errors.New("adaptertest: backend down")

// downStore is a Store whose backend is down: every Take fails with ErrDown.
func downStore() *FlakyStore {
	s := &FlakyStore{}
	s.Down.Store(true)
	return s
}

// Callback names a callback the harness installs as one that panics.
type Callback string

// The callbacks an adapter takes from the application.
const (
	NoCallback   Callback = ""
	KeyCallback  Callback = "key"
	SkipCallback Callback = "skip"
	CostCallback Callback = "cost"
)

// Setup is what the harness installs: the middleware (or interceptor) with
// these options, in front of a handler whose runs it counts.
type Setup struct {
	// Limiter decides.
	Limiter *core.Limiter
	// Logger, when not nil, is the middleware's logger.
	Logger *slog.Logger
	// OnError, when not nil, is installed as the error handler: it is given
	// the error of an undecided request; true lets the request through,
	// false refuses it with 503 (gRPC: Unavailable).
	OnError func(err error) (proceed bool)
	// Panic, when set, installs that callback as one that panics.
	Panic Callback
	// Cost, when set, installs a cost callback that reads the cost from the
	// request header X-Cost (empty: 0).
	Cost bool
	// Skip, when set, installs a skip callback that exempts the requests
	// with an X-Skip header.
	Skip bool
	// Router names one of the harness's router configurations (Routers);
	// "" is the framework's default.
	Router string
	// Routes installs a second middleware on one route only, by route name
	// ("login", "files"), with the options above; the global one (Limiter)
	// is installed only if Limiter is not nil.
	Routes map[string]Route
	// Key, when not nil, replaces the policies' keys in the global
	// middleware (the WithKey option).
	Key keyfunc.Func
	// Headers, when not nil, is the middleware's header configuration.
	Headers *ratelimitfields.Config
	// InHandler, when not nil, is called by the route handlers with the
	// adapter's view of their request, built in the handler (the
	// adapter's Request), and the framework's request value it views
	// (*gin.Context, echo.Context, *fiber.Ctx, *http.Request), before
	// they answer.
	InHandler func(view keyfunc.Request, native any)
	// Denied, when set, installs a denied handler that answers 429 with the
	// body DeniedBody gives for the Decision it finds in the request and the
	// Retry-After already set on the response.
	Denied bool
}

// Route is a middleware installed on one route only.
type Route struct {
	// Limiter decides.
	Limiter *core.Limiter
	// Key, when not nil, replaces the policies' keys (the WithKey option).
	Key keyfunc.Func
}

// Request is one request the suite sends.
type Request struct {
	// Path is the request target (default "/"); a gRPC harness ignores it.
	Path string
	// Remote is the client's address (default 192.0.2.1), or NoAddress; a
	// gRPC harness ignores it.
	Remote string
	// Header is added to the request (each value as its own field line).
	// An HTTP harness's handlers answer with the status HeaderStatus names
	// (StatusOf).
	Header http.Header
	// Gone makes the request's context cancelled before the middleware
	// decides, as for a client that disconnected.
	Gone bool
	// Form, when not nil, makes the request a POST of this form
	// (application/x-www-form-urlencoded); an HTTP harness routes POST
	// "/login" as it routes GET "/login". A gRPC harness ignores it.
	Form url.Values
}

// NoAddress is the Request.Remote of a client with no address, as a
// Unix socket's peer ("@").
const NoAddress = "@"

// Response is what the client saw. A gRPC harness maps codes to statuses:
// OK 200, ResourceExhausted 429, Unavailable 503, anything else 500.
type Response struct {
	Status int
	Header http.Header
	Body   string
	// Ran names the route whose handler ran ("root" for "/", "login" for
	// "/login", "files" for "/files/{name}"), or is "" if none ran.
	Ran string
	// RPC marks the answer to a gRPC call: Header holds its header and
	// trailer metadata, Body its status message; it has no problem
	// document and no handler body.
	RPC bool
}

// The headers of the suite's requests and of an HTTP harness's responses.
const (
	// HeaderRoute is the response header an HTTP harness's handlers set to
	// the name of their route (Response.Ran).
	HeaderRoute = "X-Test-Route"
	// HeaderDecision is the response header an HTTP harness's handlers set
	// to Describe of the Decision the adapter's DecisionFrom found.
	HeaderDecision = "X-Test-Decision"
	// HeaderStatus is the request header that names the status the
	// handler answers with (StatusOf).
	HeaderStatus = "X-Test-Status"
	// HeaderForm is the response header an HTTP harness's handlers set to
	// the request's form value "username", as the framework reads it.
	HeaderForm = "X-Test-Form"
)

// ContextKey is the key of ContextValue in the context of every request
// an HTTP harness sends: the context the adapter's keyfunc.Request gives.
type ContextKey struct{}

// ContextValue is the value of ContextKey in a request's context.
const ContextValue = "the request's context"

// Describe is what a handler reports of the Decision the adapter gave it
// (ok: one was found): "none", or the binding policy, the state and the
// remaining quota ("per-ip normal 9"); "inconsistent" if any of also (the
// Decision as the adapter's other storage holds it) is not d.
func Describe(d *core.Decision, ok bool, also ...any) string {
	if !ok {
		return "none"
	}
	for _, a := range also {
		if a != any(d) {
			return "inconsistent"
		}
	}
	b := d.Bound()
	return fmt.Sprintf("%s %s %d", b.Policy, d.State(), b.Remaining)
}

// DeniedBody is the body of the denied handler Setup.Denied installs, given
// what it found: the Decision and the Retry-After on the response.
func DeniedBody(d *core.Decision, ok bool, retryAfter string) string {
	return "denied " + Describe(d, ok) + " retry=" + retryAfter
}

// StatusOf is the status a handler answers with when the request's
// HeaderStatus is v: v as a number, 200 if it is none.
func StatusOf(v string) int {
	if n, err := strconv.Atoi(v); err == nil {
		return n
	}
	return http.StatusOK
}

// Refused is the message of an error handler's refusal in an HTTP harness
// (status 503): the body says it, in the framework's own format.
const Refused = "try later"

// Server is one installed middleware in front of a counting handler. An
// HTTP harness routes GET "/" (route "root"), "/login" ("login") and
// "/files/{name}" ("files", one path segment) in the framework's own
// syntax; a gRPC harness calls one unary method.
type Server interface {
	// Do sends r from the address 192.0.2.1 (or the harness's fixed peer).
	Do(t *testing.T, r Request) Response
	// Runs is how many times the handler ran.
	Runs() int64
}

// Harness installs an adapter for the suite.
type Harness interface {
	Start(t *testing.T, s Setup) Server
	// Routers lists the router configurations the path variants run under
	// (the framework's path options); none for gRPC, which has no paths.
	Routers() []string
}

// Run runs the conformance suite against h: every case for an HTTP
// harness, the protocol-neutral ones for a gRPC harness (no Routers).
func Run(t *testing.T, h Harness) {
	t.Run("UndecidedLogIsRateLimited", func(t *testing.T) { undecidedLogIsRateLimited(t, h) })
	t.Run("ErrorHandlerCanContinue", func(t *testing.T) { errorHandlerCanContinue(t, h) })
	t.Run("PanickingCallbacks", func(t *testing.T) { panickingCallbacks(t, h) })
	t.Run("DisconnectedClient", func(t *testing.T) { disconnectedClient(t, h) })
	t.Run("Concurrent", func(t *testing.T) { concurrent(t, h) })
	t.Run("HeadersAndWarningState", func(t *testing.T) { headersAndWarningState(t, h) })
	t.Run("SeveralPolicies", func(t *testing.T) { severalPolicies(t, h) })
	t.Run("BindingMoves", func(t *testing.T) { bindingMoves(t, h) })
	t.Run("Hooks", func(t *testing.T) { hooks(t, h) })
	t.Run("Cost", func(t *testing.T) { cost(t, h) })
	t.Run("Skip", func(t *testing.T) { skip(t, h) })
	t.Run("Undecided", func(t *testing.T) { undecided(t, h) })
	t.Run("StoreRecovers", func(t *testing.T) { storeRecovers(t, h) })
	t.Run("DecisionInHandler", func(t *testing.T) { decisionInHandler(t, h) })
	t.Run("HeaderConfig", func(t *testing.T) { headerConfig(t, h) })
	if routers := h.Routers(); len(routers) > 0 { // an HTTP adapter
		t.Run("RefillAndOtherClients", func(t *testing.T) { refillAndOtherClients(t, h) })
		t.Run("DeniedHandler", func(t *testing.T) { deniedHandler(t, h) })
		t.Run("PerRoute", func(t *testing.T) { perRoute(t, h) })
		t.Run("Stacked", func(t *testing.T) { stacked(t, h) })
		t.Run("StackedRefunds", func(t *testing.T) { stackedRefunds(t, h) })
		t.Run("RouteTemplate", func(t *testing.T) { routeTemplate(t, h) })
		t.Run("ClientAddress", func(t *testing.T) { clientAddress(t, h) })
		t.Run("RequestView", func(t *testing.T) { requestView(t, h) })
		if a, ok := h.(Accessor); ok {
			t.Run("Accessor", func(t *testing.T) { accessor(t, h, a) })
		}
		t.Run("Policies", func(t *testing.T) { policies(t, h) })
		t.Run("PathVariants", func(t *testing.T) { pathVariants(t, h, routers) })
	}
}

// PathVariants are spellings of "/login" and "/files/a": cases, slashes,
// dot segments, escapes, queries. Which ones reach a handler depends on the
// framework and its path options; the suite asserts that whichever does is
// counted by its route's policy.
var PathVariants = []string{"/login", "/LOGIN", "/Login", "/login/", "/login//", "/LOGIN/", "//login", "/./login",
	"/x/../login", "/log%69n", "/%6Cogin", "/login?a=1", "/login%2F", "/files/a", "/FILES/a", "/Files/A", "/files/a/",
	"/files/a%2Fb", "/files/a%2fb", "/files/%61", "/files//a"}

// pathVariants: every spelling of a path that the
// framework serves from a route's handler is counted by that route's
// policy, under each of the framework's path options.
func pathVariants(t *testing.T, h Harness, routers []string) {
	for _, router := range routers {
		for _, v := range PathVariants {
			t.Run(router+v, func(t *testing.T) {
				l, err := core.NewLimiter(memStore(t), []core.Policy{
					{Name: "login", Key: keyfunc.Const("all"), Limit: core.PerHour(1), Match: core.Match{Routes: []string{"/login"}}},
					{Name: "files", Key: keyfunc.Const("all"), Limit: core.PerHour(1), Match: core.Match{Routes: []string{"/files/*"}}},
				})
				require.NoError(t, err)
				s := h.Start(t, Setup{Limiter: l, Router: router})
				res := s.Do(t, Request{Path: v})
				if res.Ran == "" {
					require.NotEqual(t, http.StatusOK, res.Status, "%s answered 200 without a handler", v)
					return
				}
				if res.Ran == "root" {
					return // no route's handler ran: nothing to count
				}
				rl := sftest.List(t, res.Header.Get("RateLimit"))
				require.Len(t, rl, 1, "%s reached the %s handler uncounted", v, res.Ran)
				require.Equal(t, res.Ran, rl[0].Name, "%s reached the %s handler", v, res.Ran)
			})
		}
	}
}

// slogTo is a text logger writing to w, or discarding if w is nil.
func slogTo(w *SyncBuffer) *slog.Logger {
	if w == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// limiter is a Limiter of one policy "per-ip" of l keyed by key (default
// keyfunc.IP).
func limiter(t *testing.T, s core.Store, key keyfunc.Func, l core.Limit) *core.Limiter {
	t.Helper()
	if key == nil {
		key = keyfunc.IP()
	}
	lim, err := core.NewLimiter(s, []core.Policy{{Name: "per-ip", Key: key, Limit: l}})
	require.NoError(t, err)
	return lim
}

// memStore is a memory store on a fake clock that stands still.
func memStore(t *testing.T) core.Store {
	t.Helper()
	return clockStore(t, limitertest.NewClock())
}

// SyncBuffer is a log sink safe for concurrent writes.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// undecidedLogIsRateLimited: a flood of undecided
// requests writes one line per second, not one per request.
func undecidedLogIsRateLimited(t *testing.T, h Harness) {
	var logs SyncBuffer
	s := h.Start(t, Setup{
		Limiter: limiter(t, downStore(), nil, core.PerMinute(1)),
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
	})
	start := time.Now()
	for range 200 {
		require.Equal(t, http.StatusOK, s.Do(t, Request{}).Status)
	}
	lines := strings.Count(logs.String(), "request not rate limited")
	require.GreaterOrEqual(t, lines, 1)
	require.LessOrEqual(t, lines, int(time.Since(start)/time.Second)+1, logs.String())
	require.EqualValues(t, 200, s.Runs())
}

// errorHandlerCanContinue: the error handler chooses to
// let an undecided request through or to refuse it.
func errorHandlerCanContinue(t *testing.T, h Harness) {
	l := limiter(t, downStore(), nil, core.PerMinute(1))
	for _, proceed := range []bool{true, false} {
		var mu sync.Mutex
		var got error
		s := h.Start(t, Setup{Limiter: l, OnError: func(err error) bool {
			mu.Lock()
			got = err
			mu.Unlock()
			return proceed
		}})
		res := s.Do(t, Request{})
		mu.Lock()
		require.ErrorIs(t, got, ErrDown)
		mu.Unlock()
		if proceed {
			require.Equal(t, http.StatusOK, res.Status)
			require.EqualValues(t, 1, s.Runs())
		} else {
			require.Equal(t, http.StatusServiceUnavailable, res.Status)
			require.Zero(t, s.Runs())
		}
	}
}

// panickingCallbacks: a key function, skip or cost
// callback that panics takes neither the request nor the process down: the
// request is undecided, for the error handler (no recovery middleware).
func panickingCallbacks(t *testing.T, h Harness) {
	for _, cb := range []Callback{KeyCallback, SkipCallback, CostCallback} {
		t.Run(string(cb), func(t *testing.T) {
			var mu sync.Mutex
			var got error
			s := h.Start(t, Setup{
				Limiter: limiter(t, memStore(t), nil, core.PerMinute(1)),
				Panic:   cb,
				OnError: func(err error) bool {
					mu.Lock()
					got = err
					mu.Unlock()
					return false
				},
			})
			for range 3 {
				res := s.Do(t, Request{})
				mu.Lock()
				err := got
				mu.Unlock()
				if cb == KeyCallback && err == nil {
					// The Limiter may treat the key as missing and skip the
					// policy: still a decision, never a crash.
					require.Equal(t, http.StatusOK, res.Status)
					continue
				}
				require.Equal(t, http.StatusServiceUnavailable, res.Status)
				require.ErrorContains(t, err, "panic")
			}
		})
	}
}

// disconnectedClient: a client whose request context is
// cancelled before the decision is either counted or refused: the handler
// never runs uncounted. Real Redis, alone and behind a guard.
func disconnectedClient(t *testing.T, h Harness) {
	rs := redistest.StartServer(t)
	for _, behind := range []string{"redis", "guard"} {
		t.Run(behind, func(t *testing.T) {
			// A timeout far above a loaded machine's latency, in the store
			// (its own default, 50ms, bounds each call under the guard's) and
			// in the guard: the live requests below must be decided, not
			// failed open.
			rstore, err := redisstore.New(rs.Client(t), redisstore.WithPrefix(behind+":"), redisstore.WithTimeout(5*time.Second))
			require.NoError(t, err)
			t.Cleanup(func() { _ = rstore.Close() })
			var store core.Store = rstore
			if behind == "guard" {
				g, err := guard.New(rstore, guard.WithFailOpen(), guard.WithTimeout(5*time.Second), guard.WithLogger(slog.New(slog.DiscardHandler)))
				require.NoError(t, err)
				store = g
			}
			const capacity = 5
			s := h.Start(t, Setup{
				Limiter: limiter(t, store, keyfunc.Const("one"), core.PerHour(capacity)),
				Logger:  slog.New(slog.DiscardHandler),
			})
			for range 40 {
				before := s.Runs()
				res := s.Do(t, Request{Gone: true})
				if s.Runs() == before {
					require.NotEqual(t, http.StatusOK, res.Status, "a request that did not run is not answered 200")
				}
			}
			require.LessOrEqual(t, s.Runs(), int64(capacity), "every handler run was counted")
			// What ran was counted: with live requests after them, the
			// handler never runs more often than the capacity.
			for range capacity + 2 {
				s.Do(t, Request{})
			}
			require.LessOrEqual(t, s.Runs(), int64(capacity), "handler runs never exceed what was counted")
			require.Positive(t, s.Runs())
		})
	}
}

// cost: a request costs what the cost callback says (0 means 1), a denied
// request consumes nothing, and a cost above the capacity can never
// succeed: 429 with no Retry-After and a detail that says so.
func cost(t *testing.T, h Harness) {
	s := h.Start(t, Setup{Limiter: limiter(t, memStore(t), nil, core.PerMinute(10)), Cost: true})
	steps := []struct {
		cost      string
		status    int
		remaining string
	}{
		{"", 200, "9"},  // no cost: 1
		{"0", 200, "8"}, // 0 means 1
		{"5", 200, "3"},
		{"4", 429, "3"}, // denied: consumes nothing
		{"3", 200, "0"},
		{"1", 429, "0"},
	}
	for i, st := range steps {
		res := s.Do(t, Request{Header: http.Header{"X-Cost": {st.cost}}})
		require.Equal(t, st.status, res.Status, "step %d", i)
		require.Equal(t, st.remaining, res.Header.Get("X-RateLimit-Remaining"), "step %d", i)
		if i == 3 {
			require.Equal(t, "6", res.Header.Get("Retry-After"), "one token short, at 6s a token")
		}
	}
	require.EqualValues(t, 4, s.Runs(), "the handler never runs for a denied request")

	s = h.Start(t, Setup{Limiter: limiter(t, memStore(t), nil, core.PerMinute(10)), Cost: true})
	res := s.Do(t, Request{Header: http.Header{"X-Cost": {"11"}}})
	require.Equal(t, http.StatusTooManyRequests, res.Status)
	require.Empty(t, res.Header.Values("Retry-After"), "no wait would help")
	rl := sftest.List(t, res.Header.Get("RateLimit"))
	require.Len(t, rl, 1)
	require.Equal(t, map[string]int64{"r": 10}, rl[0].Params, "no t when no wait lets the request through")
	if p := checkProblem(t, res, "per-ip"); !res.RPC {
		require.Contains(t, p.Detail, "can never succeed")
	}
	require.Equal(t, "10", res.Header.Get("X-RateLimit-Limit"))
	require.Zero(t, s.Runs())
}

// skip: a skipped request is neither counted nor given headers, and its
// handler sees no Decision.
func skip(t *testing.T, h Harness) {
	s := h.Start(t, Setup{Limiter: limiter(t, memStore(t), nil, core.PerMinute(2)), Skip: true})
	for range 5 {
		res := s.Do(t, Request{Header: http.Header{"X-Skip": {"1"}}})
		require.Equal(t, http.StatusOK, res.Status)
		require.Equal(t, "none", res.Header.Get(HeaderDecision), "a skipped request has no Decision")
		require.Empty(t, res.Header.Get("RateLimit"), "skipped requests get no headers")
		require.Empty(t, res.Header.Get("X-RateLimit-State"))
		require.Empty(t, res.Header.Get("X-RateLimit-Remaining"))
	}
	res := s.Do(t, Request{})
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "per-ip normal 1", res.Header.Get(HeaderDecision), "skipped requests are not counted")
	require.Equal(t, "1", res.Header.Get("X-RateLimit-Remaining"))
	require.EqualValues(t, 6, s.Runs())
}

// undecided: a request the Limiter cannot decide (its store fails, it has
// no identity or no client address, its cost is invalid) goes through without rate-limit
// headers and is logged by default; an error handler that refuses it
// answers instead, without the error text, and the handler does not run.
func undecided(t *testing.T, h Harness) {
	healthy, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(10)}})
	require.NoError(t, err)
	type undecidedCase struct {
		name    string
		limiter *core.Limiter
		req     Request
		is      error
		logged  string // what the log says of the error
	}
	cases := []undecidedCase{
		{"store fails", limiter(t, downStore(), nil, core.PerMinute(10)), Request{}, ErrDown, ErrDown.Error()},
		{"no identity", healthy, Request{}, keyfunc.ErrNoKey, `header \"X-API-Key\" is empty`},
		{"invalid cost", healthy, Request{Header: http.Header{"X-Api-Key": {"k"}, "X-Cost": {"-1"}}}, core.ErrInvalidCost, "Cost: must not be negative, got -1"},
	}
	if len(h.Routers()) > 0 { // an HTTP harness chooses the client's address
		cases = append(cases, undecidedCase{"no client address", limiter(t, memStore(t), nil, core.PerMinute(10)), Request{Remote: NoAddress}, keyfunc.ErrNoKey, `no client IP: transport peer \"@\" is not an IP address`})
	}
	for _, tc := range cases {
		t.Run(tc.name+"/fail open", func(t *testing.T) {
			var logs SyncBuffer
			s := h.Start(t, Setup{Limiter: tc.limiter, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Cost: true})
			res := s.Do(t, tc.req)
			require.Equal(t, http.StatusOK, res.Status)
			if !res.RPC {
				require.Equal(t, "hello", res.Body)
			}
			require.Equal(t, "none", res.Header.Get(HeaderDecision), "no Decision when undecided")
			requireNoHeaders(t, res)
			require.Contains(t, logs.String(), "sluice: request not rate limited")
			require.Contains(t, logs.String(), tc.logged, "the log says why")
			require.EqualValues(t, 1, s.Runs())
		})
		t.Run(tc.name+"/error handler", func(t *testing.T) {
			var mu sync.Mutex
			var got error
			s := h.Start(t, Setup{Limiter: tc.limiter, Cost: true, OnError: func(err error) bool {
				mu.Lock()
				got = err
				mu.Unlock()
				return false
			}})
			res := s.Do(t, tc.req)
			require.Equal(t, http.StatusServiceUnavailable, res.Status)
			require.Contains(t, res.Body, Refused, "the error handler's answer reaches the client")
			require.NotContains(t, res.Body, "down", "no error text reaches the client")
			requireNoHeaders(t, res)
			require.Zero(t, s.Runs(), "the handler does not run after the error handler refused")
			mu.Lock()
			defer mu.Unlock()
			require.ErrorIs(t, got, tc.is)
		})
	}
}

// IPLimiter is a Limiter of one policy "per-ip" of l, keyed by keyfunc.IP,
// on a memory store that t closes: the fixture of an adapter's own tests
// and benchmarks.
func IPLimiter(t testing.TB, l core.Limit) *core.Limiter {
	t.Helper()
	st, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	lim, err := core.NewLimiter(st, []core.Policy{{Name: "per-ip", Key: keyfunc.IP(), Limit: l}})
	require.NoError(t, err)
	return lim
}
