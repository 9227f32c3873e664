// Package keyfunc turns an incoming request into the key a rate limit counts
// against: a client address, an API key, a user, a route, or a combination.
//
// A Request is a read-only view of one HTTP or gRPC request that each
// framework adapter implements without copying. A Func maps a Request to a
// key. Every built-in Func either returns a non-empty key or an error; when
// the value it looks for is missing the error wraps ErrNoKey, because an
// empty key would make every unidentified request share one bucket. What an
// unidentified request gets (denied, allowed, limited by another policy) is
// the limiter's decision, not the key function's.
//
// # Client addresses
//
// IP and IPExtractor key a request by its client address. By default only
// the transport peer (RemoteAddr) is used and every header is ignored. Behind
// reverse proxies, declare them with TrustProxies (a list of networks) or
// TrustHops (a count), and the extractor walks X-Forwarded-For, Forwarded
// (FromForwarded), or reads a single-address header such as X-Real-IP
// (FromClientIPHeader). Lists are walked from the right, skipping trusted
// proxies, to the first address that is not one. Anything unexpected in the
// part of a header that has to be read makes the extractor fall back to the
// transport peer: it fails closed, never to a value the client chose.
// IPv4-mapped IPv6 addresses are folded to IPv4, and IPv6 clients are grouped
// by network (/64 unless IPv6Prefix says otherwise), since one subscriber can
// use every address of at least a /64.
//
// # What a client can forge
//
// Every request header is written by whoever sent the request, so every
// header is forgeable unless a proxy you run overwrites it or appends to it:
//
//   - RemoteAddr is the TCP (or QUIC, or unix socket) peer. It cannot be
//     forged beyond what the network allows, but it is your proxy's address
//     when there is a proxy, and many clients can share one address (NAT,
//     carrier-grade NAT, corporate egress).
//   - X-Forwarded-For and Forwarded are lists to which each proxy appends the
//     address it received the request from. A client can send any list it
//     likes; only the entries your own proxies appended are true, and they
//     are at the right-hand end. The leftmost entry, which many frameworks
//     return by default, is whatever the client wrote.
//   - X-Real-IP, CF-Connecting-IP, True-Client-IP and similar single-address
//     headers are true only if your edge proxy overwrites them on every
//     request and nothing else can reach the application. Many proxies pass
//     a client's value through unchanged.
//   - API keys (Header, Query) are chosen by the client: keyed before they are
//     validated, every invented value is a fresh bucket.
//   - A user or tenant put in the context by authentication middleware
//     (FromContext) is as trustworthy as that middleware, and is the best
//     identity for per-account limits.
//   - Route and Method describe the endpoint, not the client; they are meant
//     to be joined with an identity.
//
// # Composition
//
// Join combines keys unambiguously ("user|route"); Hash and HMAC replace a key
// with a 22-character digest so that raw addresses and API keys are not
// stored in Redis or shown in metrics. Const puts every request in one bucket,
// on purpose.
//
// # Mistakes
//
// The constructors whose arguments are written in code (Header(""),
// Join() or IP with contradictory options, say) panic when the policy is
// built, like regexp.MustCompile: a start-up panic beats a limit that
// silently never applies. IP() without options cannot fail. When the proxy
// list or the other IP options come from configuration, NewIPExtractor
// returns the mistake as an error instead.
//
// Every Func and IPExtractor in this package is safe for concurrent use.
package keyfunc
