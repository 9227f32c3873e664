package middleware

import (
	"context"
	"log/slog"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// Config holds the options every adapter offers, over the framework's
// request value C and the adapter's per-request state R. The adapters'
// With... options set it.
type Config[C any, R Request] struct {
	// Key, when set, replaces each policy's Key (core.Call.Key).
	Key keyfunc.Func
	// Cost, when set, is the cost of a request (0 also means 1).
	Cost func(C) int64
	// Skip, when set, exempts the requests it returns true for: they are
	// neither counted nor given headers.
	Skip func(C) bool
	// Denied answers a denied request, once its headers are set and its
	// Decision stored; Run returns its error. It must be set.
	Denied func(C, R) error
	// OnError, when set, decides what an undecided request gets: proceed
	// runs the rest of the chain uncounted; otherwise the chain is aborted
	// and Run returns err. Unset, the request proceeds and the error is
	// logged.
	OnError func(C, error) (proceed bool, err error)
	// Logger receives the undecided requests and failed refunds, each kind
	// at most a line a second (slog.Default() if nil).
	Logger *slog.Logger
	// Headers selects the header families and the reset format.
	Headers ratelimitfields.Config
}

// Request is an adapter's state of one request: the keyfunc.Request view
// of the framework's request, with room for its Decision. It is a pointer:
// allocated by Framework.Start with the Decision inside (net/http, Gin,
// Echo), or the framework's own request, whose Decision method allocates
// the Decision (Fiber). Run calls Decision once.
type Request interface {
	keyfunc.Request
	// Decision is where the request's own Decision is decided.
	Decision() *core.Decision
}

// Framework maps one framework onto the flow: its request value C, its
// per-request state R, how the chain goes on, and where the headers and
// the Decision go. Its methods are called by Flow.Run only.
type Framework[C any, R Request] interface {
	// Start returns the state of a request that is to be decided.
	Start(c C) R
	// Earlier returns the Decision an earlier sluice middleware stored on
	// the request, or nil.
	Earlier(c C) *core.Decision
	// Publish sets the rate-limit headers of d, formatted by f, on the
	// response and stores d where the adapter's DecisionFrom finds it. d is
	// r's own Decision, or its merge with an earlier one (Merge).
	Publish(c C, r R, d *core.Decision, f *fieldfmt.Formatter)
	// Next runs the rest of the chain; r is nil when the request was not
	// decided (skipped).
	Next(c C, r R) error
	// Watch runs the rest of the chain as Next does and returns the status
	// of the response, for refunds.
	Watch(c C, r R) (status int, err error)
	// Abort ends the chain after a denial or a refusing error handler
	// (gin's c.Abort); most frameworks need nothing.
	Abort(c C)
	// Unavailable answers a request whose client went away before it was
	// counted (503), or returns the error that makes the framework do so.
	Unavailable(c C) error
}

// Flow is the middleware sequence every adapter runs, once: skip,
// cost, decide, gone or refused, the error handler, not limited, merge with
// an earlier sluice middleware's Decision, headers, store the Decision,
// deny, next, and the refund after the response with its status. A Flow
// is safe for concurrent use; build one per middleware with New.
type Flow[C any, R Request, F Framework[C, R]] struct {
	cfg       Config[C, R]
	l         *core.Limiter
	fw        F
	f         *fieldfmt.Formatter
	undecided *Logger
	refunds   *Logger
}

// New returns the flow of a middleware of package pkg limiting with l:
// the Config that def and then opts (the adapter's options) set, mapped
// onto a framework by fw. It panics if l is nil.
func New[O ~func(*Config[C, R]), C any, R Request, F Framework[C, R]](pkg string, l *core.Limiter, fw F, def O, opts []O) *Flow[C, R, F] {
	if l == nil {
		panic(pkg + ".New: nil limiter")
	}
	var cfg Config[C, R]
	def(&cfg)
	for _, o := range opts {
		o(&cfg)
	}
	return &Flow[C, R, F]{cfg: cfg, l: l, fw: fw, f: Formatter(cfg.Headers), undecided: NewLogger(cfg.Logger), refunds: NewLogger(cfg.Logger)}
}

// Run runs the flow for one request and returns what the framework's
// handler returns (nil for frameworks whose handlers return nothing).
func (f *Flow[C, R, F]) Run(c C) error {
	call := core.Call{Key: f.cfg.Key}
	var err error
	if f.cfg.Skip != nil {
		var skip bool
		if skip, err = Skip(f.cfg.Skip, c); skip {
			var none R
			return f.fw.Next(c, none)
		}
	}
	if f.cfg.Cost != nil && err == nil {
		call.Cost, err = Cost(f.cfg.Cost, c)
	}
	r := f.fw.Start(c)
	ctx := r.Context()
	d := r.Decision()
	if err == nil {
		err = Decide(ctx, f.l, r, call, d)
	}
	if Gone(ctx, d, err) {
		// The client left (or the request's deadline passed) before it was
		// counted: it does not run.
		return f.fw.Unavailable(c)
	}
	if err != nil {
		if f.cfg.OnError == nil {
			f.undecided.Undecided(ctx, err)
			return f.fw.Next(c, r)
		}
		proceed, rerr := f.cfg.OnError(c, err)
		if proceed {
			return f.fw.Next(c, r)
		}
		f.fw.Abort(c)
		return rerr
	}
	if !d.Limited() { // no policy applies to this request
		return f.fw.Next(c, r)
	}
	// A stacked middleware's headers and Decision are those of both: the
	// most constraining policy is the one named.
	f.fw.Publish(c, r, Merge(f.fw.Earlier(c), d), f.f)
	if !d.Allowed {
		err = f.cfg.Denied(c, r)
		f.fw.Abort(c)
		return err
	}
	if !d.Refundable() {
		return f.fw.Next(c, r)
	}
	status, err := f.fw.Watch(c, r)
	if rerr := f.l.Refund(context.WithoutCancel(ctx), d, status); rerr != nil {
		f.refunds.RefundFailed(ctx, rerr)
	}
	return err
}
