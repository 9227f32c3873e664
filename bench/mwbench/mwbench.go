// Package mwbench holds the HTTP middleware benchmarks shared by the go test
// benchmarks of module github.com/sluicehq/sluice/bench and by its report
// program (cmd/report): the per-request cost of rate-limit middleware around
// a bare handler, each middleware on its library's in-memory store with the
// same limit: net/http middleware called directly through ServeHTTP
// (Overhead), and Fiber middleware through the app's fasthttp handler
// (FiberOverhead).
package mwbench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	sethvargohttp "github.com/sethvargo/go-limiter/httplimit"
	sethvargomem "github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululestdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
)

// The limit of every middleware: Rate requests per Period for each client
// IP, far more than a benchmark sends, so no request is ever denied.
const (
	Rate   = 1_000_000_000
	Period = time.Minute
)

// ClientAddr is the RemoteAddr of every request: one client IP.
const ClientAddr = "203.0.113.7:52310"

// Impl is one middleware under comparison.
type Impl struct {
	// Name is the sub-benchmark and -impls name.
	Name string
	// Label describes it in the report.
	Label string
	// Module is the module whose version the report prints ("" for none).
	Module string
	// Baseline is true for the bare handler, whose cost the others' overhead
	// is measured from; Peer is true for the other libraries.
	Baseline, Peer bool
	// Headers lists the header fields it sets on an allowed response.
	Headers string
	// Wrap returns the middleware around next (a fresh store each time) and
	// a function that releases its store's background goroutines.
	Wrap func(next http.Handler) (http.Handler, func(), error)
}

// Impls returns the baseline, sluice (all its headers, then only the family
// the peers write) and the peers, in report order.
func Impls() []Impl {
	const xrl = "X-RateLimit-Limit, -Remaining, -Reset"
	return []Impl{
		{Name: "bare", Label: "bare handler (baseline)", Baseline: true, Headers: "none",
			Wrap: func(next http.Handler) (http.Handler, func(), error) { return next, func() {}, nil }},
		{Name: "sluice", Label: "sluice httplimit (default headers)", Module: "github.com/sluicehq/sluice",
			Headers: "RateLimit-Policy, RateLimit, " + xrl + ", X-RateLimit-State", Wrap: sluice(ratelimitfields.Config{})},
		{Name: "sluice-xrl", Label: "sluice httplimit, X-RateLimit-* only", Module: "github.com/sluicehq/sluice",
			Headers: xrl, Wrap: sluice(ratelimitfields.Config{Omit: ratelimitfields.Draft | ratelimitfields.State})},
		{Name: "ulule", Label: "ulule stdlib middleware + memory store", Module: "github.com/ulule/limiter/v3", Peer: true,
			Headers: xrl, Wrap: ululeMiddleware},
		{Name: "httprate", Label: "go-chi/httprate LimitByIP", Module: "github.com/go-chi/httprate", Peer: true,
			Headers: xrl, Wrap: httprateMiddleware},
		{Name: "throttled", Label: "throttled HTTPRateLimiterCtx + memstore (GCRA)", Module: "github.com/throttled/throttled/v2", Peer: true,
			Headers: xrl, Wrap: throttledMiddleware},
		{Name: "sethvargo", Label: "sethvargo/go-limiter httplimit + memorystore", Module: "github.com/sethvargo/go-limiter", Peer: true,
			Headers: xrl + " (an HTTP date)", Wrap: sethvargoMiddleware},
	}
}

// sluice: httplimit.New on a core.Limiter with one keyfunc.IP() policy on
// the default memory store (token bucket).
func sluice(h ratelimitfields.Config) func(http.Handler) (http.Handler, func(), error) {
	return func(next http.Handler) (http.Handler, func(), error) {
		l, done, err := SluiceLimiter()
		if err != nil {
			return nil, nil, err
		}
		return httplimit.New(l, httplimit.WithHeaders(h))(next), done, nil
	}
}

// SluiceLimiter returns the core.Limiter of sluice's middlewares: one
// keyfunc.IP() policy of Rate per Period on a default memory store, and the
// function that closes the store.
func SluiceLimiter() (*core.Limiter, func(), error) {
	ip := keyfunc.IP()
	st, err := memorystore.New()
	if err != nil {
		return nil, nil, err
	}
	l, err := core.NewLimiter(st, []core.Policy{{Name: "per-ip", Key: ip, Limit: core.Per(Rate, Period)}})
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return l, func() { st.Close() }, nil
}

// ulule: drivers/middleware/stdlib with drivers/store/memory (a fixed
// window), keyed by the client IP (its default key getter).
// Its store's cleaner stops only through a finalizer.
func ululeMiddleware(next http.Handler) (http.Handler, func(), error) {
	lim := ulule.New(ululemem.NewStore(), ulule.Rate{Period: Period, Limit: Rate})
	return ululestdlib.NewMiddleware(lim).Handler(next), func() {}, nil
}

// httprate: LimitByIP, a sliding window counter in memory keyed by
// RemoteAddr's IP. (httprate v0.16 marks it deprecated in favour of LimitBy
// with a key read from chi's ClientIP middleware; LimitByIP is exactly
// LimitBy(rate, period, KeyByIP), the same work without a router.)
func httprateMiddleware(next http.Handler) (http.Handler, func(), error) {
	return httprate.LimitByIP(Rate, Period)(next), func() {}, nil
}

// throttled: HTTPRateLimiterCtx with its GCRA limiter on store/memstore
// (the LRU of 65536 keys its README shows), burst Rate, varying by
// RemoteAddr's IP.
func throttledMiddleware(next http.Handler) (http.Handler, func(), error) {
	st, err := throttledmem.NewCtx(65536)
	if err != nil {
		return nil, nil, err
	}
	lim, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerDuration(Rate, Period), MaxBurst: Rate - 1})
	if err != nil {
		return nil, nil, err
	}
	h := &throttled.HTTPRateLimiterCtx{RateLimiter: lim, VaryBy: &throttled.VaryBy{RemoteAddr: true}}
	return h.RateLimit(next), func() {}, nil
}

// sethvargo: httplimit.NewMiddleware on memorystore (a token bucket of
// Rate per Period), keyed by IPKeyFunc() (RemoteAddr's IP, no headers).
func sethvargoMiddleware(next http.Handler) (http.Handler, func(), error) {
	st, err := sethvargomem.New(&sethvargomem.Config{Tokens: Rate, Interval: Period})
	if err != nil {
		return nil, nil, err
	}
	done := func() { _ = st.Close(context.Background()) }
	m, err := sethvargohttp.NewMiddleware(st, sethvargohttp.IPKeyFunc())
	if err != nil {
		done()
		return nil, nil, err
	}
	return m.Handle(next), done, nil
}

// Bare is the handler every middleware wraps: it only writes the status.
func Bare() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
}

// Writer is a reusable http.ResponseWriter: Reset clears its header map
// (keeping the map's storage) so one Writer serves every iteration, and what
// a benchmark measures is the middleware's own allocations, not a recorder's.
type Writer struct {
	h     http.Header
	Code  int
	Bytes int
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer { return &Writer{h: make(http.Header, 8)} }

func (w *Writer) Header() http.Header { return w.h }

func (w *Writer) WriteHeader(code int) {
	if w.Code == 0 {
		w.Code = code
	}
}

func (w *Writer) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.Bytes += len(p)
	return len(p), nil
}

// Reset forgets the previous response.
func (w *Writer) Reset() {
	clear(w.h)
	w.Code, w.Bytes = 0, 0
}

// NewRequest returns the request every iteration serves: GET /api/items
// from ClientAddr, no forwarding headers.
func NewRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://example.com/api/items", nil)
	r.RemoteAddr = ClientAddr
	return r
}

// Overhead serves b.N requests from one client IP through impl's middleware
// around Bare, reusing one Writer and one Request. The benchmark fails if a
// response is not 200 or, for a middleware, lacks X-RateLimit-Remaining (a
// configuration check).
func Overhead(b *testing.B, impl Impl) {
	h, done, err := impl.Wrap(Bare())
	if err != nil {
		fatalf(b, "%s: %v", impl.Name, err)
	}
	defer done()
	w, r := NewWriter(), NewRequest()
	if err := Check(h, w, r, !impl.Baseline); err != nil { // also creates the client's key
		fatalf(b, "%s: %v", impl.Name, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w.Reset()
		h.ServeHTTP(w, r)
	}
	b.StopTimer()
	if w.Code != http.StatusOK {
		fatalf(b, "%s: last response %d, want 200 (the limit is %d per %s)", impl.Name, w.Code, Rate, Period)
	}
}

// Check serves one request and reports whether it was admitted, with
// rate-limit headers if limited is set.
func Check(h http.Handler, w *Writer, r *http.Request, limited bool) error {
	w.Reset()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		return fmt.Errorf("status %d, want 200", w.Code)
	}
	if limited && w.Header().Get("X-RateLimit-Remaining") == "" {
		return fmt.Errorf("no X-RateLimit-Remaining header in %v", w.Header())
	}
	return nil
}

// RunAll runs scenario as one sub-benchmark per implementation.
func RunAll(b *testing.B, scenario func(*testing.B, Impl)) {
	for _, impl := range Impls() {
		b.Run(impl.Name, func(b *testing.B) { scenario(b, impl) })
	}
}

var (
	failMu  sync.Mutex
	failMsg string
)

// fatalf fails b, remembering the message for LastFailure: testing.Benchmark
// discards a failed benchmark's log.
func fatalf(b *testing.B, format string, args ...any) {
	b.Helper()
	msg := fmt.Sprintf(format, args...)
	failMu.Lock()
	failMsg = msg
	failMu.Unlock()
	b.Fatal(msg)
}

// LastFailure returns, and forgets, the message of the last benchmark that
// failed in this package, or "".
func LastFailure() string {
	failMu.Lock()
	defer failMu.Unlock()
	msg := failMsg
	failMsg = ""
	return msg
}
