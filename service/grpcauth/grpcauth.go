package grpcauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/grpclimit"
	"github.com/sluicehq/sluice/ratelimitfields"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/internal/requestid"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Access is what a gRPC method asks of its caller.
type Access int

const (
	// Open methods need no token: the decision plane (checks, Envoy's
	// ShouldRateLimit), health and reflection.
	Open Access = iota
	// Token methods need a token of scope write, and are not counted
	// against the token's admin limits: the store API's decisions (Take,
	// TakeBatch, Refund), the data plane of the apps that use ratelimitd
	// as their store (remotestore).
	Token
	// Admin methods need a token of scope write and count against the
	// token's admin_write limit (adminauth.PolicyWrite), shared with the
	// admin REST API and page: the changes an admin makes (ResetLimit,
	// and the store API's Reset, SetOverride and ClearOverride).
	Admin
)

// String names the access level.
func (a Access) String() string {
	switch a {
	case Open:
		return "open"
	case Token:
		return "token"
	case Admin:
		return "admin"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// The methods Ratelimitd guards.
const (
	// MethodResetLimit is the native API's ResetLimit.
	MethodResetLimit = "/sluice.ratelimit.v1.RateLimitService/ResetLimit"
	// StoreServicePrefix starts the name of every method of the store API
	// (sluice.ratelimit.v1.StoreService).
	StoreServicePrefix = "/sluice.ratelimit.v1.StoreService/"
)

// storeDecisions are the store API's methods that decide (and so are
// Token): every other method of the store API changes state (Admin).
var storeDecisions = map[string]bool{
	StoreServicePrefix + "Take":      true,
	StoreServicePrefix + "TakeBatch": true,
	StoreServicePrefix + "Refund":    true,
}

// Ratelimitd is ratelimitd's access table: ResetLimit and every method of
// the store API but its decisions (Reset, SetOverride, ClearOverride, and
// any added later) are Admin; the store API's Take, TakeBatch and Refund
// are Token; everything else is Open.
func Ratelimitd(fullMethod string) Access {
	switch {
	case fullMethod == MethodResetLimit:
		return Admin
	case storeDecisions[fullMethod]:
		return Token
	case strings.HasPrefix(fullMethod, StoreServicePrefix):
		return Admin
	}
	return Open
}

// Options configures New. The zero value is ratelimitd's table and
// slog.Default().
type Options struct {
	// Access says what each method (its full name, /package.Service/Method)
	// needs; nil: Ratelimitd.
	Access func(fullMethod string) Access
	// Logger receives the failures clients are not told about (the token
	// database's, the rate-limit store's) and one line per admitted Admin
	// call naming its token. nil: slog.Default().
	Logger *slog.Logger
}

// Interceptor puts the guarded methods of a gRPC server behind the admin
// tokens of an adminauth.Auth: see Unary. It is safe for concurrent use.
type Interceptor struct {
	auth   func() *adminauth.Auth
	access func(string) Access
	log    *slog.Logger
}

// New returns the interceptor of the tokens auth returns. auth is called
// on every guarded call: while it returns nil (ratelimitd started from its
// rules cache and has not reached the database yet) guarded calls are
// UNAVAILABLE; open calls never call it.
func New(auth func() *adminauth.Auth, o Options) (*Interceptor, error) {
	if auth == nil {
		return nil, errors.New("grpcauth: auth: required")
	}
	if o.Access == nil {
		o.Access = Ratelimitd
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Interceptor{auth: auth, access: o.Access, log: o.Logger}, nil
}

// The messages of refusals. None says whether a token exists: no token,
// a malformed one, an unknown and a revoked one get the same answer.
const (
	msgUnauthenticated = "a valid bearer token is required (metadata authorization: Bearer TOKEN)"
	msgNoDatabase      = "the token database has not been reached yet; retry later"
	msgAuthFailed      = "the token could not be checked; retry later"
	msgLimitFailed     = "the rate limit could not be checked; retry later"
	msgTooManyFailures = "too many failed authentications from this client; retry later"
)

// Unary returns the unary server interceptor. An Open method runs as is.
// A guarded one needs exactly one `authorization: Bearer SECRET` metadata
// value naming a live token (else UNAUTHENTICATED, the same for every
// cause), of scope write (else PERMISSION_DENIED); an Admin method is
// then counted against the token's admin_write limit: its rate-limit
// fields are sent as header metadata, and an exhausted token gets
// RESOURCE_EXHAUSTED with RetryInfo, QuotaFailure and ErrorInfo (as
// package grpclimit answers) and the fields and grpc-retry-pushback-ms in
// its trailer; an admitted one runs with its Principal and request id in
// its context (see check). A client (its address: IPv4, or IPv6 /64)
// whose authentications failed too often gets RESOURCE_EXHAUSTED for a
// secret not in the Auth's cache, with no database lookup, as the admin
// API answers 429 (adminauth.ErrTooManyFailures). A failure of the token
// database or of the rate-limit store is UNAVAILABLE with a generic
// message (the cause is logged): the guarded methods fail closed.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		acc := i.access(info.FullMethod)
		if acc == Open {
			return handler(ctx, req)
		}
		ctx, md, err := i.check(ctx, info.FullMethod, acc)
		if len(md) > 0 {
			if err != nil {
				_ = grpc.SetTrailer(ctx, md)
			} else {
				_ = grpc.SetHeader(ctx, md)
			}
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor: the same checks as Unary,
// made once when the stream starts.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		acc := i.access(info.FullMethod)
		if acc == Open {
			return handler(srv, ss)
		}
		ctx, md, err := i.check(ss.Context(), info.FullMethod, acc)
		if len(md) > 0 {
			if err != nil {
				ss.SetTrailer(md)
			} else {
				_ = ss.SetHeader(md)
			}
		}
		if err != nil {
			return err
		}
		return handler(srv, &principalStream{ServerStream: ss, ctx: ctx})
	}
}

// principalStream is a ServerStream whose context carries the caller.
type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *principalStream) Context() context.Context { return s.ctx }

// MetadataRequestID is the metadata key of an Admin call's request id:
// the client's when it is valid (1 to 128 of A-Z a-z 0-9 - _ . :), else a
// new one, sent back in the response's header (or trailer) and recorded in
// the audit rows of its changes (rulesdb.WithRequestID).
const MetadataRequestID = "x-request-id"

// check authenticates, authorises and (for Admin) counts one call; md is
// the metadata to send. An Admin call's ctx gets its request id
// (rulesdb.WithRequestID, sent back as MetadataRequestID) and, once
// authenticated, its Principal (adminauth.WithPrincipal): the actor and
// request id of the audit rows of its changes. A Token call's ctx is kept
// as it is (decisions are not audited, and this is their hot path).
func (i *Interceptor) check(ctx context.Context, method string, acc Access) (context.Context, metadata.MD, error) {
	var md metadata.MD
	if acc == Admin {
		ctx, md = withRequestID(ctx)
	}
	d, err := i.authorize(ctx, method, acc)
	md = metadata.Join(md, d.md)
	if err != nil || acc != Admin {
		return ctx, md, err
	}
	return adminauth.WithPrincipal(ctx, *d.p), md, nil
}

// withRequestID returns ctx with the call's request id, and the metadata
// that sends it back.
func withRequestID(ctx context.Context) (context.Context, metadata.MD) {
	in, _ := metadata.FromIncomingContext(ctx)
	id := ""
	if v := in.Get(MetadataRequestID); len(v) == 1 && requestid.Valid(v[0]) {
		id = v[0]
	} else {
		id = requestid.New()
	}
	return rulesdb.WithRequestID(ctx, id), metadata.Pairs(MetadataRequestID, id)
}

// authorized is what authorize found of an admitted call: its principal
// and the rate-limit metadata of an Admin call.
type authorized struct {
	p  *adminauth.Principal
	md metadata.MD
}

// authorize authenticates, authorises and (for Admin) counts one call.
// A refusal's rate-limit metadata comes with it (sent in the trailer).
func (i *Interceptor) authorize(ctx context.Context, method string, acc Access) (authorized, error) {
	secret, ok := bearer(ctx)
	if !ok {
		return authorized{}, status.Error(codes.Unauthenticated, msgUnauthenticated)
	}
	auth := i.auth()
	if auth == nil {
		return authorized{}, status.Error(codes.Unavailable, msgNoDatabase)
	}
	actx := ctx
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		actx = adminauth.WithClient(ctx, pr.Addr.String()) // its failures are bounded
	}
	p, err := auth.Authenticate(actx, secret)
	switch {
	case errors.Is(err, rulesdb.ErrUnauthorized):
		return authorized{}, status.Error(codes.Unauthenticated, msgUnauthenticated)
	case errors.Is(err, adminauth.ErrTooManyFailures):
		return authorized{}, status.Error(codes.ResourceExhausted, msgTooManyFailures)
	case err != nil:
		i.log.ErrorContext(ctx, "grpc: authenticating a token", "method", method, "err", err)
		return authorized{}, status.Error(codes.Unavailable, msgAuthFailed)
	}
	if !p.Scope.Allows(rulesdb.ScopeWrite) {
		return authorized{}, status.Errorf(codes.PermissionDenied, "this token's scope is %s; %s needs scope %s", p.Scope, method, rulesdb.ScopeWrite)
	}
	if acc != Admin {
		return authorized{}, nil
	}
	d, err := auth.Limit(ctx, p, adminauth.PolicyWrite)
	if err != nil {
		i.log.ErrorContext(ctx, "grpc: admin rate limit store failed; refusing (fail closed)", "method", method, "token", p.Name, "err", err)
		return authorized{}, status.Error(codes.Unavailable, msgLimitFailed)
	}
	at := time.Now()
	if len(d.Results) > 0 && d.Results[0].At != 0 {
		at = time.UnixMicro(d.Results[0].At)
	}
	md := grpclimit.Metadata(ratelimitfields.Config{}.Format(&d, at))
	if !d.Allowed {
		md[grpclimit.MetadataPushback] = []string{grpclimit.Pushback(&d)}
		return authorized{md: md}, grpclimit.DeniedStatus(&d).Err()
	}
	i.log.InfoContext(ctx, "grpc: admin call", "method", method, "token", p.Name, "request_id", rulesdb.RequestID(ctx))
	return authorized{p: &p, md: md}, nil
}

// bearer returns the secret of the call's one authorization metadata
// value (adminauth.BearerToken reads it as the HTTP front door does).
func bearer(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	return adminauth.BearerToken(md.Get("authorization"))
}
