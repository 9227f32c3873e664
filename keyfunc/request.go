package keyfunc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrNoKey means a key function found nothing to identify the request by: the
// header, query parameter, route, method or context value was empty, or no
// client address could be determined. Every built-in Func returns an error
// wrapping ErrNoKey instead of an empty key, because an empty key would put
// every unidentified request into one shared bucket. Match it with errors.Is;
// package core uses the same value.
var ErrNoKey = errors.New("sluice: empty key")

// noKeyError is a key function's error for a request without the value the
// function reads: its text is the message alone (the caller's prefixes and
// this message say enough without ErrNoKey's own text appended), and it
// wraps ErrNoKey.
type noKeyError struct{ msg string }

func (e *noKeyError) Error() string { return e.msg }

func (e *noKeyError) Unwrap() error { return ErrNoKey }

// noKey returns a noKeyError with the formatted message.
func noKey(format string, args ...any) error {
	return &noKeyError{msg: fmt.Sprintf(format, args...)}
}

// Request is a read-only view of one incoming request, HTTP or gRPC. Each
// framework adapter implements it over the framework's own request value
// without copying it. A Request is used only for the duration of the call that
// received it and only by one goroutine at a time.
type Request interface {
	// Context returns the request's context; never nil.
	Context() context.Context
	// Method returns the HTTP method ("GET"); for gRPC, "POST".
	Method() string
	// Route returns the low-cardinality route template that matched
	// ("/users/:id"), or "" if none did; for gRPC, the full method name
	// ("/pkg.Service/Method").
	Route() string
	// Path returns the request path as received ("/users/42").
	Path() string
	// Header returns the first value of the named header, "" if absent. The
	// name is matched case-insensitively. For gRPC it reads the incoming
	// metadata.
	Header(name string) string
	// HeaderValues returns every value (line) of the named header in the
	// order received, nil if absent. X-Forwarded-For and Forwarded may be
	// sent as several lines that together form one list. The caller must not
	// modify the returned slice.
	HeaderValues(name string) []string
	// Query returns the first value of the named URL query parameter, "" if
	// absent; always "" for gRPC.
	Query(name string) string
	// RemoteAddr returns the transport peer address as the server saw it:
	// usually "host:port" or "[v6%zone]:port", but it may be "", a unix
	// socket name ("@", "/run/app.sock") or anything else a listener reports.
	RemoteAddr() string
}

// PeerRequest is a Request that can also give its transport peer as an
// address, for adapters whose framework holds the peer as one (a
// net.Addr) rather than as text: IP reads PeerAddr instead of formatting
// and parsing RemoteAddr. An adapter's view implements it as an option;
// key functions need not.
type PeerRequest interface {
	Request
	// PeerAddr returns the IP address of RemoteAddr's host, IPv4-mapped
	// addresses unmapped and without a zone (what IP would parse from
	// RemoteAddr), or ok false when the peer is not an IP address (a unix
	// socket, say); IP then reads RemoteAddr.
	PeerAddr() (addr netip.Addr, ok bool)
}

// PeerTextRequest is a PeerRequest that also holds the text of its peer's
// address in memory of its own, for adapters whose views live in per-request
// memory: IP returns PeerText as the key of a peer it keys by its whole
// address instead of formatting it into a new string. Like the view's
// other strings, the text is valid while the key function that received
// the view runs (core copies the identity where it keeps it). An adapter's
// view implements it as an option; key functions need not.
type PeerTextRequest interface {
	PeerRequest
	// PeerText returns PeerAddr's address as netip.Addr.String writes it,
	// the same text on every call for one request, or ok false when
	// PeerAddr's is.
	PeerText() (text string, ok bool)
}

// Func derives a rate-limit key from a request. It returns a non-empty key, or
// an error; a Func must never return "" with a nil error (the built-in ones
// return an error wrapping ErrNoKey instead). A Func must be safe for
// concurrent use: one Func serves every request of a policy.
type Func func(Request) (string, error)

// Static is a Request built from plain fields, for tests and non-HTTP callers
// (queue consumers, CLIs, batch jobs) that want to reuse the key functions.
//
// Header names are matched case-insensitively: an exact match of the key in
// Headers is tried first, then an ASCII case-insensitive scan, so both
// http.Header values (canonical keys) and gRPC metadata (lower-case keys)
// can be assigned to Headers directly. If several keys differ only in case,
// which of them a case-insensitive lookup finds is unspecified.
//
// The zero value is an empty request whose Context is context.Background.
// Both Static and *Static implement Request; a Static must not be modified
// while a Func reads it.
type Static struct {
	Ctx        context.Context     // nil means context.Background()
	MethodName string              // returned by Method
	RouteName  string              // returned by Route
	PathName   string              // returned by Path
	Headers    map[string][]string // header lines by name; see above for lookup
	Queries    map[string]string   // URL query parameters by exact name
	Remote     string              // returned by RemoteAddr
}

var _ Request = Static{}

// Context returns s.Ctx, or context.Background() if it is nil.
func (s Static) Context() context.Context {
	if s.Ctx == nil {
		return context.Background()
	}
	return s.Ctx
}

// Method returns s.MethodName.
func (s Static) Method() string { return s.MethodName }

// Route returns s.RouteName.
func (s Static) Route() string { return s.RouteName }

// Path returns s.PathName.
func (s Static) Path() string { return s.PathName }

// Header returns the first line of the named header, "" if there is none.
func (s Static) Header(name string) string {
	if v := s.HeaderValues(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// HeaderValues returns the lines of the named header.
func (s Static) HeaderValues(name string) []string {
	if v, ok := s.Headers[name]; ok {
		return v
	}
	for k, v := range s.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return nil
}

// Query returns s.Queries[name].
func (s Static) Query(name string) string { return s.Queries[name] }

// RemoteAddr returns s.Remote.
func (s Static) RemoteAddr() string { return s.Remote }
