package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Config is everything `ratelimitd serve` is told: each field is one of
// its flags (RegisterFlags binds them, with their defaults), and Validate's
// errors name the flag of the field they are about. The zero Config is not
// valid: start from Defaults, or from a flag set parsed with RegisterFlags.
type Config struct {
	Rules     string // rules file; "" = the bundled example (or --db)
	RulesPoll time.Duration
	// DB is the rules database (file:PATH or postgres://...), exclusive
	// with Rules; RulesCache its snapshot cache file ("" none), DBPoll
	// how often its revision is polled, DBTimeout the bound of each call
	// on it.
	DB         string
	RulesCache string
	DBPoll     time.Duration
	DBTimeout  time.Duration
	// AuditRetention, with DB, is how long audit rows are kept (older
	// ones are pruned every AuditPruneEvery); 0 keeps every row.
	AuditRetention time.Duration
	GRPCAddr       string
	HTTPAddr       string

	Redis             string // "" = memory store; see parseRedis
	RedisPassword     string
	RedisPrefix       string
	FailureMode       string // open, closed, fallback
	FallbackInstances int
	StoreTimeout      time.Duration
	DenyCacheKeys     int
	MemoryMaxKeys     int
	// TrafficPublish is how often, with --redis and --db, the instance
	// publishes its per-minute traffic counts to Redis for the admin
	// page's fleet figures; 0 publishes nothing.
	TrafficPublish time.Duration

	TLSCert, TLSKey string

	LogLevel  string
	LogFormat string

	DrainDelay      time.Duration
	ShutdownTimeout time.Duration
	MaxConnAge      time.Duration
	StreamWorkers   int
	// GCPercent is the garbage collector's target (Go's GOGC), applied
	// at Start unless GOGC is set in the environment.
	GCPercent int

	IdempotencyTTL     time.Duration
	IdempotencyRepeats int64
	MaxClientSkew      time.Duration
	MaxBatch           int
	BatchParallelism   int

	HTTPStatusMode bool
	StoreAPI       bool
	// GRPCAuth is --grpc-auth: "off", "admin", or "" (admin with --db,
	// off without); see grpcAuth.
	GRPCAuth  string
	PprofAddr string
}

// The values of --grpc-auth.
const (
	grpcAuthOff   = "off"
	grpcAuthAdmin = "admin"
)

// grpcAuth is --grpc-auth resolved: admin by default with --db (the
// tokens are in its database), off without.
func (c *Config) grpcAuth() string {
	switch {
	case c.GRPCAuth != "":
		return c.GRPCAuth
	case c.DB != "":
		return grpcAuthAdmin
	}
	return grpcAuthOff
}

// DefaultStreamWorkers is --grpc-stream-workers' default.
const DefaultStreamWorkers = remotestore.DefaultStreamWorkers

// DefaultGCPercent is --gc-percent's default (see
// remotestore.DefaultGCPercent, which the benchmark's gRPC floor runs with
// too).
const DefaultGCPercent = remotestore.DefaultGCPercent

// maxStreamWorkers bounds --grpc-stream-workers.
const maxStreamWorkers = 1 << 16

// Defaults returns the Config of `ratelimitd serve` given no flag: the
// memory store, the bundled example rules, gRPC on 127.0.0.1:8081 and HTTP
// on 127.0.0.1:8080.
func Defaults() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("serve", flag.ContinueOnError))
	return c
}

// RegisterFlags defines serve's flags on fs, each bound to its field of c,
// and sets every field to its flag's default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Rules, "rules", "", "rules file, sluice's format or envoyproxy/ratelimit's (told apart by content); empty: the bundled example rules")
	fs.DurationVar(&c.RulesPoll, "rules-poll", time.Second, "how often the rules file is read for changes")
	fs.StringVar(&c.DB, "db", "", "rules database instead of a rules file: file:PATH (SQLite, one instance) or postgres://USER@HOST:PORT/DB (PostgreSQL, a fleet; changes reach every instance within a second); exclusive with --rules; give a DSN holding a password in the environment (RATELIMITD_DB): it is never logged")
	fs.StringVar(&c.RulesCache, "rules-cache", "", "with --db: a file keeping the last good rules (JSON, mode 0600, rewritten atomically); an instance that cannot reach the database at start serves from it; empty: no cache (the instance then cannot start while the database is down)")
	fs.DurationVar(&c.DBPoll, "db-poll", 500*time.Millisecond, "with --db: how often the database revision is polled (PostgreSQL: the safety net behind LISTEN/NOTIFY)")
	fs.DurationVar(&c.DBTimeout, "db-timeout", rulesdb.DefaultTimeout, "with --db: bound on each database call (a query, a write's transaction, a rules load, a probe of the listener); past it an admin request gets 503 and a write is rolled back; must exceed a full rules load")
	fs.DurationVar(&c.AuditRetention, "audit-retention", 0, "with --db: audit rows older than this are deleted (checked at start and every 10 minutes; at least 1h, e.g. 2160h for 90 days); 0: every row is kept")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", "127.0.0.1:8081", "gRPC listen address: the native API, Envoy's ShouldRateLimit, health, reflection")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address: the JSON API, Envoy's /json, /metrics, /healthz, /readyz")
	fs.StringVar(&c.Redis, "redis", "", "Redis to share state on: host:port or redis://host:port[/db] (one node), redis-sentinel://MASTER@h1:p1,h2:p2[/db] (Sentinel), redis-cluster://h1:p1,h2:p2 (Cluster); rediss-... for TLS; empty: the memory store")
	fs.StringVar(&c.RedisPassword, "redis-password", "", "Redis password (AUTH); prefer the environment variable")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", "sluice", "first segment of every Redis key (middleware instances with the same prefix share the counters)")
	fs.StringVar(&c.FailureMode, "failure-mode", "open", "what a check gets while Redis fails: open (allowed), closed (denied) or fallback (a local limiter, limits divided by --fallback-instances)")
	fs.IntVar(&c.FallbackInstances, "fallback-instances", 1, "the number of ratelimitd instances sharing Redis, dividing each limit in fallback mode")
	fs.DurationVar(&c.StoreTimeout, "store-timeout", 5*time.Millisecond, "bound on each Redis call; a slower call is a failure answered by --failure-mode")
	fs.IntVar(&c.DenyCacheKeys, "deny-cache-keys", 100_000, "keys the guard's deny cache holds (a key denied by Redis is denied locally until its retry time); 0 disables it")
	fs.DurationVar(&c.TrafficPublish, "traffic-publish", 10*time.Second, "with --redis and --db: how often this instance publishes its per-minute traffic counts to Redis, for the admin page's fleet figures (one round trip, off the decision path); 0: never (the page shows this instance alone)")
	fs.IntVar(&c.MemoryMaxKeys, "memory-max-keys", 1<<20, "keys the memory store holds (the store without --redis, and fallback mode's local limiter); when full, the most nearly fresh keys are evicted first (a throttled key last)")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM certificate: serve gRPC and HTTP over TLS (with --tls-key)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.DurationVar(&c.DrainDelay, "drain-delay", 5*time.Second, "on SIGTERM, how long health reports NOT_SERVING while still answering, before the servers stop")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "after the drain delay, the bound on finishing the requests in flight")
	fs.DurationVar(&c.MaxConnAge, "grpc-max-connection-age", 30*time.Minute, "gRPC connections are closed (gracefully) after this age, so clients rebalance across instances; 0: never")
	fs.IntVar(&c.StreamWorkers, "grpc-stream-workers", DefaultStreamWorkers, "long-lived goroutines that serve the gRPC calls, reusing their grown stacks (a call finding them all busy gets a goroutine of its own: no limit on concurrency); 0: a goroutine per call")
	fs.IntVar(&c.GCPercent, "gc-percent", DefaultGCPercent, "the garbage collector's target, as Go's GOGC: a collection starts once the heap has grown this many percent over what the last one left live (Go's default is 100); higher means fewer collections, less CPU per check and fewer pauses, for a heap of up to (1 + N/100) times the live one (lower it for a memory store holding millions of keys); -1 turns the collector off, and is refused unless GOMEMLIMIT bounds the heap. GOGC, when set in the environment, wins over this flag")
	fs.DurationVar(&c.IdempotencyTTL, "idempotency-ttl", 5*time.Minute, "how long an admitted check with an idempotency key is remembered (whole seconds or more)")
	fs.Int64Var(&c.IdempotencyRepeats, "idempotency-repeats", 3, "free repeats of an admitted idempotent check within --idempotency-ttl (1-1000); later ones are counted")
	fs.DurationVar(&c.MaxClientSkew, "max-client-skew", 24*time.Hour, "a check's client_time further than this from the server's clock is invalid input (it is a hint, never the clock)")
	fs.IntVar(&c.MaxBatch, "max-batch", 1000, "the most checks of one CheckRateLimitBatch call")
	fs.IntVar(&c.BatchParallelism, "batch-parallelism", 0, "above 1: a batch's checks are decided in rounds of one check of each caller, a round's in one round trip to Redis, those with an idempotency key on up to this many goroutines (one caller's in request order); 1: one after the other; 0: 16 with --redis, 1 on the memory store")
	fs.BoolVar(&c.HTTPStatusMode, "http-status-mode", false, "the HTTP check API answers a denial with 429 and Retry-After (for nginx auth_request) instead of 200 with allowed:false")
	fs.BoolVar(&c.StoreAPI, "store-api", true, "serve the store API (sluice.ratelimit.v1.StoreService) on the gRPC address, for middleware using ratelimitd as its store (remotestore); it needs a write token when --grpc-auth is admin (the default with --db), otherwise none: then expose it to trusted callers only")
	fs.StringVar(&c.GRPCAuth, "grpc-auth", "", "admin: ResetLimit and the store API need a bearer token of --db's database (scope write; ResetLimit and the store API's Reset, SetOverride and ClearOverride count against the token's admin write limit); off: no token asked (expose the gRPC port to trusted callers only); empty: admin with --db, off without. Checks, Envoy's ShouldRateLimit, health and reflection never need one. With --db every gRPC admin change is audited either way")
	fs.StringVar(&c.PprofAddr, "pprof-addr", "", "serve net/http/pprof on this address (loopback advised); empty: off")
}

// Validate checks c, naming the flag of each error (one per line, every
// error of c).
func (c *Config) Validate() error {
	var errs []error
	for _, check := range []func() []error{
		c.rulesErrors, c.engineErrors, c.addrErrors, c.storeErrors, c.tlsAndLogErrors, c.lifecycleErrors,
	} {
		errs = append(errs, check()...)
	}
	return errors.Join(errs...)
}

// rulesErrors checks where the rules come from: --rules, --db and what
// goes with them, --grpc-auth (whose tokens are in --db's database).
func (c *Config) rulesErrors() []error {
	var errs []error
	if c.RulesPoll < time.Millisecond {
		errs = append(errs, fmt.Errorf("--rules-poll: must be at least 1ms, got %s", c.RulesPoll))
	}
	if c.DB != "" && c.Rules != "" {
		errs = append(errs, errors.New("--db, --rules: give one or the other (a database or a rules file)"))
	}
	if c.DB == "" && c.RulesCache != "" {
		errs = append(errs, errors.New("--rules-cache: needs --db"))
	}
	if c.RulesCache != "" {
		if fi, err := os.Stat(filepath.Dir(c.RulesCache)); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("--rules-cache: the directory of %s must exist", c.RulesCache))
		}
	}
	if c.DB != "" && strings.Contains(c.DB, "://") && !rulesdb.IsPostgres(c.DB) && !strings.HasPrefix(c.DB, "file:") {
		errs = append(errs, fmt.Errorf("--db: want file:PATH or postgres://..., got %s", rulesdb.Redact(c.DB)))
	}
	switch c.GRPCAuth {
	case "", grpcAuthOff:
	case grpcAuthAdmin:
		if c.DB == "" {
			errs = append(errs, errors.New("--grpc-auth: admin needs --db (the tokens are in the rules database); give --db or --grpc-auth=off"))
		}
	default:
		errs = append(errs, fmt.Errorf("--grpc-auth: want off or admin, got %q", c.GRPCAuth))
	}
	if c.DBPoll < time.Millisecond {
		errs = append(errs, fmt.Errorf("--db-poll: must be at least 1ms, got %s", c.DBPoll))
	}
	if c.DBTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("--db-timeout: must be at least 1ms, got %s", c.DBTimeout))
	}
	switch {
	case c.AuditRetention == 0:
	case c.DB == "":
		errs = append(errs, errors.New("--audit-retention: needs --db (the audit is in the rules database)"))
	case c.AuditRetention < MinAuditRetention:
		errs = append(errs, fmt.Errorf("--audit-retention: must be 0 (keep every row) or at least %s, got %s", MinAuditRetention, c.AuditRetention))
	}
	return errs
}

// engineErrors checks what the engine is told: idempotency, the client's
// clock, batches.
func (c *Config) engineErrors() []error {
	var errs []error
	if c.IdempotencyTTL < time.Second {
		errs = append(errs, fmt.Errorf("--idempotency-ttl: must be at least 1s, got %s", c.IdempotencyTTL))
	}
	if c.IdempotencyRepeats < 1 || c.IdempotencyRepeats > 1000 {
		errs = append(errs, fmt.Errorf("--idempotency-repeats: want 1 to 1000, got %d", c.IdempotencyRepeats))
	}
	if c.MaxClientSkew <= 0 {
		errs = append(errs, fmt.Errorf("--max-client-skew: must be positive, got %s", c.MaxClientSkew))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("--max-batch: must be at least 1, got %d", c.MaxBatch))
	}
	if c.BatchParallelism < 0 {
		errs = append(errs, fmt.Errorf("--batch-parallelism: must not be negative, got %d", c.BatchParallelism))
	}
	return errs
}

// addrErrors checks the listen addresses.
func (c *Config) addrErrors() []error {
	var errs []error
	if c.GRPCAddr == "" {
		errs = append(errs, errors.New("--grpc-addr: required"))
	}
	if c.HTTPAddr == "" {
		errs = append(errs, errors.New("--http-addr: required"))
	}
	return errs
}

// storeErrors checks the store: Redis, the guard around it, the memory
// store.
func (c *Config) storeErrors() []error {
	var errs []error
	if c.Redis != "" {
		if _, err := parseRedis(c.Redis); err != nil {
			errs = append(errs, fmt.Errorf("--redis: %w", err))
		}
	}
	if c.RedisPrefix == "" || strings.ContainsAny(c.RedisPrefix, "{}") {
		errs = append(errs, fmt.Errorf("--redis-prefix: must be non-empty and free of braces, got %q", c.RedisPrefix))
	}
	switch c.FailureMode {
	case "open", "closed", "fallback":
	default:
		errs = append(errs, fmt.Errorf("--failure-mode: want open, closed or fallback, got %q", c.FailureMode))
	}
	if c.TrafficPublish < 0 || (c.TrafficPublish > 0 && c.TrafficPublish < 100*time.Millisecond) {
		errs = append(errs, fmt.Errorf("--traffic-publish: must be 0 (never) or at least 100ms, got %s", c.TrafficPublish))
	}
	if c.FallbackInstances < 1 {
		errs = append(errs, fmt.Errorf("--fallback-instances: must be at least 1, got %d", c.FallbackInstances))
	}
	if c.StoreTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--store-timeout: must be positive, got %s", c.StoreTimeout))
	}
	if c.DenyCacheKeys < 0 {
		errs = append(errs, fmt.Errorf("--deny-cache-keys: must not be negative, got %d", c.DenyCacheKeys))
	}
	if c.MemoryMaxKeys < 1 {
		errs = append(errs, fmt.Errorf("--memory-max-keys: must be at least 1, got %d", c.MemoryMaxKeys))
	}
	return errs
}

// tlsAndLogErrors checks TLS and the log.
func (c *Config) tlsAndLogErrors() []error {
	var errs []error
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert, --tls-key: give both or neither"))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format: want text or json, got %q", c.LogFormat))
	}
	return errs
}

// lifecycleErrors checks the drain, the shutdown and the gRPC server's
// connections and workers.
func (c *Config) lifecycleErrors() []error {
	var errs []error
	if c.DrainDelay < 0 {
		errs = append(errs, fmt.Errorf("--drain-delay: must not be negative, got %s", c.DrainDelay))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout: must be positive, got %s", c.ShutdownTimeout))
	}
	if c.MaxConnAge < 0 {
		errs = append(errs, fmt.Errorf("--grpc-max-connection-age: must not be negative, got %s", c.MaxConnAge))
	}
	if c.StreamWorkers < 0 || c.StreamWorkers > maxStreamWorkers {
		errs = append(errs, fmt.Errorf("--grpc-stream-workers: must be 0 to %d, got %d", maxStreamWorkers, c.StreamWorkers))
	}
	if err := gcPercentError(c.GCPercent, gogcSet(os.Getenv), debug.SetMemoryLimit(-1)); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// gcPercentError checks --gc-percent: positive, or -1 (off) when a memory
// limit (GOMEMLIMIT, memLimit below math.MaxInt64) bounds the heap: with
// the collector off and no limit the heap grows until the host kills the
// process. When GOGC is set (gogcSet) the flag is not applied, so only its
// range is checked.
func gcPercentError(percent int, gogcSet bool, memLimit int64) error {
	switch {
	case percent < -1 || percent == 0:
		return fmt.Errorf("--gc-percent: must be positive, or -1 (off), got %d", percent)
	case percent == -1 && !gogcSet && memLimit == math.MaxInt64:
		return errors.New("--gc-percent: -1 turns the garbage collector off, which needs a memory limit (set GOMEMLIMIT, e.g. GOMEMLIMIT=2GiB): without one the heap grows without bound")
	}
	return nil
}

// NewLogger returns the logger of c's --log-level and --log-format (c
// valid), writing to w.
func (c *Config) NewLogger(w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// parseLevel reads a log level name.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("want debug, info, warn or error, got %q", s)
}

// attrs are the settings in force, logged at start (the password masked).
func (c *Config) attrs() []any {
	rules := c.Rules
	switch {
	case c.DB != "":
		rules = "(database)"
	case rules == "":
		rules = "(bundled example)"
	}
	store := "memory"
	if c.Redis != "" {
		store = c.Redis
	}
	pw := ""
	if c.RedisPassword != "" {
		pw = "(set)"
	}
	return []any{
		slog.String("rules", rules), slog.String("db", rulesdb.Redact(c.DB)), slog.String("rules_cache", c.RulesCache),
		slog.Duration("db_poll", c.DBPoll), slog.Duration("db_timeout", c.DBTimeout), slog.Duration("audit_retention", c.AuditRetention), slog.String("grpc_addr", c.GRPCAddr), slog.String("http_addr", c.HTTPAddr),
		slog.String("store", store), slog.String("redis_password", pw), slog.String("redis_prefix", c.RedisPrefix),
		slog.String("failure_mode", c.FailureMode), slog.Int("fallback_instances", c.FallbackInstances),
		slog.Duration("store_timeout", c.StoreTimeout), slog.Int("deny_cache_keys", c.DenyCacheKeys),
		slog.Int("memory_max_keys", c.MemoryMaxKeys),
		slog.Bool("tls", c.TLSCert != ""), slog.String("log_level", c.LogLevel), slog.String("log_format", c.LogFormat),
		slog.Duration("drain_delay", c.DrainDelay), slog.Duration("shutdown_timeout", c.ShutdownTimeout),
		slog.Duration("grpc_max_connection_age", c.MaxConnAge), slog.Int("grpc_stream_workers", c.StreamWorkers), slog.Int("gc_percent", c.GCPercent), slog.Duration("rules_poll", c.RulesPoll),
		slog.Duration("idempotency_ttl", c.IdempotencyTTL), slog.Int64("idempotency_repeats", c.IdempotencyRepeats),
		slog.Duration("max_client_skew", c.MaxClientSkew), slog.Int("max_batch", c.MaxBatch), slog.Int("batch_parallelism", c.batchParallelism()), slog.Bool("http_status_mode", c.HTTPStatusMode),
		slog.Bool("store_api", c.StoreAPI), slog.String("grpc_auth", c.grpcAuth()), slog.String("pprof_addr", c.PprofAddr),
	}
}

// batchParallelism is --batch-parallelism, 0 resolved: 16 over Redis (a
// round of a batch's checks in one round trip), 1 in memory.
func (c *Config) batchParallelism() int {
	switch {
	case c.BatchParallelism > 0:
		return c.BatchParallelism
	case c.Redis != "":
		return 16
	}
	return 1
}
