package redisstore

import (
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/core"
)

type config struct {
	prefix    string
	timeout   time.Duration
	th        core.Thresholds
	clock     func() time.Time
	inflight  int
	maxBatch  int
	functions bool
	log       *slog.Logger
}

// Option configures a Store.
type Option func(*config)

// WithPrefix sets the first segment of every key (default "sluice"). It must
// not contain braces.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithTimeout bounds every call, queueing included (default 50ms). A call
// that times out returns an error wrapping context.DeadlineExceeded. The
// bound holds whatever the client's settings; with ContextTimeoutEnabled set
// on the client a call needs no extra goroutine to enforce it.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithThresholds sets the warning-state thresholds (default 0.8 and 0.7).
// Every instance sharing the keys must use the same ones.
func WithThresholds(th core.Thresholds) Option { return func(c *config) { c.th = th } }

// WithClock makes the scripts use the caller's clock instead of Redis TIME.
// Meant for tests and simulations: instances with skewed clocks would not
// agree. Expiries are absolute, so the clock must not run behind Redis's.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithPipelining sets how many pipelines may be in flight at once to each
// server (default 1: per master on a Cluster) and how many decisions one
// pipeline carries at most (default 256). A decision that finds a pipeline
// slot free goes alone, at once; those that find every slot busy queue and
// go together, in one write, when a pipeline returns. More slots make each
// pipeline shallower. WithPipelining(0, 0) sends every decision on its own.
func WithPipelining(inflight, maxBatch int) Option {
	return func(c *config) { c.inflight, c.maxBatch = inflight, maxBatch }
}

// WithFunctions says whether the store runs its code as Redis Functions
// (default true). With functions, the code is loaded once into Redis (FUNCTION
// LOAD of one library whose name carries a digest of its code; Redis keeps it
// across restarts when it persists data, and copies it to replicas) and every
// decision is an FCALL, which costs the server less than running a script:
// the code is not defined again on every call. Where functions are
// unavailable (Redis before 7, or an ACL or a proxy that refuses FUNCTION or
// FCALL) the store switches to scripts by itself. WithFunctions(false) uses
// scripts only: EVALSHA, and EVAL when the server does not have the script.
func WithFunctions(enabled bool) Option { return func(c *config) { c.functions = enabled } }

// WithLogger sets the logger of the store's own events, such as a denied
// group whose admissions could not be given back (slog.Default() if unset).
// They are logged at most once a second; Stats counts them all.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }
