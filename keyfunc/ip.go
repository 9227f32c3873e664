package keyfunc

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// IPOption configures an IPExtractor; see NewIPExtractor.
type IPOption func(*ipConfig)

type source uint8

const (
	sourceDefault   source = iota // X-Forwarded-For when a proxy is trusted
	sourceXFF                     // FromXForwardedFor
	sourceForwarded               // FromForwarded
	sourceSingle                  // FromClientIPHeader
)

type ipConfig struct {
	trusted   []netip.Prefix
	trustedBy []string // the option that added each trusted prefix
	hops      int
	hopsSet   bool
	trustUnix bool
	source    source
	header    string
	v4bits    int
	v6bits    int
	errs      []error
}

func (c *ipConfig) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("keyfunc: "+format, args...))
}

// TrustProxies marks the given networks as your reverse proxies. Each entry is
// a CIDR prefix ("10.0.0.0/8", "2001:db8::/32") or a single address
// ("192.0.2.10"). Host bits are ignored, and an IPv4-mapped IPv6 prefix
// ("::ffff:10.0.0.0/104") is folded to IPv4. Addresses are compared after
// IPv4-mapped IPv6 addresses are folded to IPv4, so IPv4 proxies must be
// listed as IPv4: "::/1" trusts half of the IPv6 addresses but no IPv4
// one. An entry that does not parse makes NewIPExtractor fail (and IP
// panic). Repeated calls add to the list.
//
// With trusted proxies, the forwarding header (X-Forwarded-For unless another
// source is chosen) is read only when the transport peer is inside one of
// these networks, and it is walked from the right past every trusted address
// to the first untrusted one. List every proxy that can append to the header,
// and nothing else: an address in a trusted network is never taken as a
// client.
//
// A list whose networks together cover every IPv4 address or every IPv6
// address ("0.0.0.0/0", "::/0", "::ffff:0:0/96", or "0.0.0.0/1" with
// "128.0.0.0/1") makes NewIPExtractor fail (and IP panic): it would trust
// every peer, so any client could choose its own key. IPv6 coverage ignores
// the IPv4-mapped range, whose addresses are compared as IPv4.
func TrustProxies(cidrs ...string) IPOption {
	return func(c *ipConfig) {
		for _, s := range cidrs {
			var p netip.Prefix
			var err error
			if strings.IndexByte(s, '/') >= 0 {
				p, err = netip.ParsePrefix(s)
			} else {
				var a netip.Addr
				if a, err = netip.ParseAddr(s); err == nil {
					if a.Zone() != "" {
						err = errors.New("zones are not allowed")
					} else {
						p = netip.PrefixFrom(a, a.BitLen())
					}
				}
			}
			if err != nil {
				c.fail("TrustProxies: invalid CIDR %q: %w", s, err)
				continue
			}
			c.addPrefix("TrustProxies", p)
		}
	}
}

// TrustPrefixes is TrustProxies for networks that are already parsed. An
// invalid (zero) Prefix makes NewIPExtractor fail (and IP panic), and so do
// networks that, with those of TrustProxies, cover a whole address family.
func TrustPrefixes(prefixes ...netip.Prefix) IPOption {
	return func(c *ipConfig) {
		for _, p := range prefixes {
			c.addPrefix("TrustPrefixes", p)
		}
	}
}

func (c *ipConfig) addPrefix(option string, p netip.Prefix) {
	if !p.IsValid() {
		c.fail("%s: invalid prefix %s", option, p)
		return
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			c.fail("%s: prefix %s covers more than IPv4-mapped addresses", option, p)
			return
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	c.trusted = append(c.trusted, p.Masked())
	c.trustedBy = append(c.trustedBy, option)
}

// checkCoverage fails when the trusted networks together cover every IPv4
// address or every IPv6 address: every peer would then be a proxy, and any
// client could choose its own key by writing the forwarding header.
func (c *ipConfig) checkCoverage() {
	for _, fam := range []struct {
		name string
		v4   bool
	}{{"IPv4", true}, {"IPv6", false}} {
		var ps []netip.Prefix
		var by []string
		for i, p := range c.trusted {
			if p.Addr().Is4() == fam.v4 {
				ps = append(ps, p)
				if !slices.Contains(by, c.trustedBy[i]) {
					by = append(by, c.trustedBy[i])
				}
			}
		}
		if coversFamily(ps, fam.v4) {
			c.fail("%s: the trusted networks cover every %s address, so every client could pick its own key with a forwarding header; list only your proxies", strings.Join(by, ", "), fam.name)
		}
	}
}

// coversFamily reports whether the union of ps (all of one family, masked)
// covers the whole IPv4 space (v4) or the whole IPv6 space. IPv4-mapped IPv6
// addresses (::ffff:0:0/96) never reach a trust check, because they are
// folded to IPv4 first, so they count as covered in the IPv6 space.
func coversFamily(ps []netip.Prefix, v4 bool) bool {
	type span struct{ lo, hi netip.Addr }
	spans := make([]span, 0, len(ps)+1)
	for _, p := range ps {
		spans = append(spans, span{p.Addr(), lastAddr(p)})
	}
	first, last := netip.IPv4Unspecified(), netip.AddrFrom4([4]byte{255, 255, 255, 255})
	if !v4 {
		mapped := netip.MustParsePrefix("::ffff:0:0/96")
		spans = append(spans, span{mapped.Addr(), lastAddr(mapped)})
		first = netip.IPv6Unspecified()
		last = netip.AddrFrom16([16]byte{0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0xff, 7: 0xff, 8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff})
	}
	if len(ps) == 0 {
		return false
	}
	slices.SortFunc(spans, func(a, b span) int { return a.lo.Compare(b.lo) })
	next := first // the lowest address not yet known to be covered
	for _, s := range spans {
		if s.lo.Compare(next) > 0 {
			return false // a gap before s
		}
		if s.hi.Compare(next) >= 0 {
			if s.hi == last {
				return true
			}
			next = s.hi.Next()
		}
	}
	return false
}

// lastAddr returns the highest address of the masked prefix p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TrustHops declares that exactly n reverse proxies stand in front of the
// application and that each appends the address it received the request from
// to X-Forwarded-For (or adds an element to Forwarded, with FromForwarded).
// The client is then the n-th entry from the right. The transport peer is not
// checked, so the application must be reachable only through those proxies.
// A request whose list has fewer than n entries, or whose n rightmost entries
// include an unparseable one, falls back to the transport peer.
//
// n must be between 0 and MaxHops; 0 means no proxy (the default). TrustHops
// cannot be combined with TrustProxies, TrustPrefixes, TrustUnixSocket or
// FromClientIPHeader. The last TrustHops wins.
func TrustHops(n int) IPOption {
	return func(c *ipConfig) {
		if n < 0 || n > MaxHops {
			c.fail("TrustHops: %d is out of range [0, %d]", n, MaxHops)
			return
		}
		c.hops, c.hopsSet = n, true
	}
}

// TrustUnixSocket treats a transport peer that is a unix socket (a RemoteAddr
// of "@", "@name" or an absolute path, as Go reports unix-socket peers) as a
// trusted proxy, for a reverse proxy that connects over a local socket. Such
// a peer has no IP address, so a request whose header yields none has no key
// (ErrNoKey).
func TrustUnixSocket() IPOption {
	return func(c *ipConfig) { c.trustUnix = true }
}

// FromXForwardedFor walks X-Forwarded-For, all of its lines merged in order.
// It is the default once a proxy is trusted.
func FromXForwardedFor() IPOption {
	return func(c *ipConfig) { c.source, c.header = sourceXFF, "" }
}

// FromForwarded walks the RFC 7239 Forwarded header, all of its lines merged
// in order, reading the for= parameter of each element. A node written as
// "unknown" or as an obfuscated "_token" carries no address: the walk stops
// there and falls back to the transport peer, unless TrustHops says the entry
// is one of your proxies.
func FromForwarded() IPOption {
	return func(c *ipConfig) { c.source, c.header = sourceForwarded, "" }
}

// FromClientIPHeader reads a header that carries just the client address, set
// by your edge proxy: "X-Real-IP", "CF-Connecting-IP", "True-Client-IP",
// "Fly-Client-IP". The header is believed only when the transport peer is a
// trusted proxy (TrustProxies, TrustPrefixes or TrustUnixSocket), and only if
// it has exactly one line holding one address (a port is allowed); anything
// else falls back to the peer. Use it only if the proxy overwrites the header
// on every request: most do not remove a value sent by the client.
func FromClientIPHeader(name string) IPOption {
	return func(c *ipConfig) {
		switch {
		case name == "" || !isToken(name):
			c.fail("FromClientIPHeader: invalid header name %q", name)
		case strings.EqualFold(name, "X-Forwarded-For"):
			c.fail("FromClientIPHeader: %s is a list; use FromXForwardedFor", name)
		case strings.EqualFold(name, "Forwarded"):
			c.fail("FromClientIPHeader: %s is a list; use FromForwarded", name)
		default:
			c.source, c.header = sourceSingle, name
		}
	}
}

// IPv4Prefix groups IPv4 clients by their first bits bits, 1 to 32. The
// default, 32, keys each address on its own ("203.0.113.7"); 24 keys a whole
// /24 together ("203.0.113.0/24").
func IPv4Prefix(bits int) IPOption {
	return func(c *ipConfig) {
		if bits < 1 || bits > 32 {
			c.fail("IPv4Prefix: %d is out of range [1, 32]", bits)
			return
		}
		c.v4bits = bits
	}
}

// IPv6Prefix groups IPv6 clients by their first bits bits, 1 to 128. The
// default is 64, because one subscriber usually holds at least a /64 and can
// use any address in it; 56 and 48 are common delegations too. 128 keys each
// address on its own.
func IPv6Prefix(bits int) IPOption {
	return func(c *ipConfig) {
		if bits < 1 || bits > 128 {
			c.fail("IPv6Prefix: %d is out of range [1, 128]", bits)
			return
		}
		c.v6bits = bits
	}
}

// An IPExtractor finds the client address of a request from its transport
// peer and, when proxies are trusted, from a forwarding header. It never
// believes a header the peer could have forged: without TrustProxies,
// TrustPrefixes, TrustUnixSocket or TrustHops only the peer is used.
//
// Whenever a header cannot be used (absent, unparseable, an entry with no
// address where the client should be, longer than MaxHops entries or
// MaxHeaderBytes bytes in the part that must be read), the extractor falls
// back to the transport peer: it fails closed, never to a value the client
// chose. A request whose peer is not an IP address and whose header gives
// none has no client address, reported as an error wrapping ErrNoKey.
//
// The zero value uses the transport peer only, with the default grouping
// (IPv4 /32, IPv6 /64). An IPExtractor is immutable and safe for concurrent
// use.
type IPExtractor struct {
	trusted   []netip.Prefix
	hops      int
	trustUnix bool
	source    source
	header    string
	v4bits    int // 0 means 32
	v6bits    int // 0 means 64
}

// NewIPExtractor returns an IPExtractor configured by opts. Without options it
// uses the transport peer only. It fails, naming the option, when an option
// value is invalid or when options contradict each other: TrustHops with any
// other trust option, FromClientIPHeader with TrustHops, or a header source
// (FromXForwardedFor, FromForwarded, FromClientIPHeader) with no trusted
// proxy at all.
func NewIPExtractor(opts ...IPOption) (*IPExtractor, error) {
	var c ipConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	c.checkCoverage()
	if c.hops > 0 && (len(c.trusted) > 0 || c.trustUnix) {
		c.fail("TrustHops: cannot be combined with TrustProxies, TrustPrefixes or TrustUnixSocket")
	}
	if c.hops > 0 && c.source == sourceSingle {
		c.fail("FromClientIPHeader: %s cannot be combined with TrustHops: it is believed only from a trusted peer", c.header)
	}
	if c.source != sourceDefault && c.hops == 0 && len(c.trusted) == 0 && !c.trustUnix {
		c.fail("%s: no trusted proxy: add TrustProxies, TrustPrefixes, TrustUnixSocket or TrustHops", sourceOption(c.source))
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return &IPExtractor{
		trusted:   c.trusted,
		hops:      c.hops,
		trustUnix: c.trustUnix,
		source:    c.source,
		header:    c.header,
		v4bits:    c.v4bits,
		v6bits:    c.v6bits,
	}, nil
}

func sourceOption(s source) string {
	switch s {
	case sourceXFF:
		return "FromXForwardedFor"
	case sourceForwarded:
		return "FromForwarded"
	default:
		return "FromClientIPHeader"
	}
}

// IP returns a Func that keys a request by its client address, as
// NewIPExtractor(opts...).Key does. Without options it keys by the transport
// peer and cannot fail.
//
// IP panics, with the error NewIPExtractor would return, when an option is
// invalid or the options contradict each other: like Header with an empty
// name, that is a mistake in the code that calls it. When the options come
// from configuration (a proxy list read from a file or the environment),
// build the extractor with NewIPExtractor, which returns that error, and use
// its Key method.
func IP(opts ...IPOption) Func {
	e, err := NewIPExtractor(opts...)
	if err != nil {
		panic(err)
	}
	return e.Key
}

// ClientIP returns the client address of r, unmasked: IPv4-mapped IPv6
// addresses are folded to IPv4 and zones are removed. The error, if any,
// wraps ErrNoKey.
func (e *IPExtractor) ClientIP(r Request) (netip.Addr, error) {
	a, _, err := e.clientIP(r)
	return a, err
}

// clientIP is ClientIP that also returns the RemoteAddr the address was
// parsed from when it is the transport peer's ("" when a header gave it).
func (e *IPExtractor) clientIP(r Request) (netip.Addr, string, error) {
	peer, remote, peerOK := peerAddr(r)
	switch {
	case e.hops > 0:
		if a, ok := e.walkHops(r); ok {
			return a, "", nil
		}
	case peerOK && e.trusts(peer) || !peerOK && e.trustUnix && isUnixAddr(remote):
		if a, ok := e.fromHeader(r); ok {
			return a, "", nil
		}
	}
	if !peerOK {
		if len(remote) > 64 {
			remote = remote[:64] + "..."
		}
		return netip.Addr{}, "", noKey("keyfunc: no client IP: transport peer %q is not an IP address and no trusted header gave one", remote)
	}
	return peer, remote, nil
}

// Key returns the rate-limit key of r's client address: the address itself
// for IPv4 ("203.0.113.7") or its network when grouped ("203.0.113.0/24"),
// and the IPv6 network ("2001:db8:1:2::/64"), or the address with
// IPv6Prefix(128). The error, if any, wraps ErrNoKey.
func (e *IPExtractor) Key(r Request) (string, error) {
	whole4 := e.v4bits == 0 || e.v4bits == 32
	if whole4 && e.hops == 0 && len(e.trusted) == 0 && !e.trustUnix {
		// Only the peer is used: most peers are "a.b.c.d:port", whose key
		// is already in the request (no parsing, no allocation), unless
		// the request has the address itself.
		if p, ok := r.(PeerRequest); ok {
			if a, ok := p.PeerAddr(); ok && a.Is4() {
				if t, ok := p.(PeerTextRequest); ok {
					if text, ok := t.PeerText(); ok {
						return text, nil
					}
				}
				var buf [16]byte
				return string(a.AppendTo(buf[:0])), nil
			}
		} else if host, ok := dottedPeer(r.RemoteAddr()); ok {
			return host, nil
		}
	}
	a, remote, err := e.clientIP(r)
	if err != nil {
		return "", err
	}
	if whole4 && remote != "" && a.Is4() {
		if host, ok := dottedPeer(remote); ok { // an untrusted peer
			return host, nil
		}
	}
	bits := e.v4bits
	if !a.Is4() {
		bits = e.v6bits
		if bits == 0 {
			bits = 64
		}
	} else if bits == 0 {
		bits = 32
	}
	var buf [48]byte
	if bits >= a.BitLen() {
		return string(a.AppendTo(buf[:0])), nil
	}
	p, err := a.Prefix(bits)
	if err != nil { // unreachable: bits is within range for a's family
		return "", fmt.Errorf("keyfunc: %w", err)
	}
	b := p.Addr().AppendTo(buf[:0])
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(bits), 10)
	return string(b), nil
}

// peerAddr returns r's transport peer: its address and ok true when it is
// an IP address (with a port or not), else RemoteAddr's text. remote is
// also the text when it was parsed, "" when r gave the address itself
// (PeerRequest).
func peerAddr(r Request) (a netip.Addr, remote string, ok bool) {
	if p, isPeer := r.(PeerRequest); isPeer {
		if a, ok = p.PeerAddr(); ok {
			return a, "", true
		}
	}
	remote = r.RemoteAddr()
	a, ok = parseAddrPort(remote, false)
	return a, remote, ok
}

// dottedPeer returns the host of remote when remote is an IPv4 address in
// dotted-quad form, with or without a port ("203.0.113.7:52310"), read
// without a netip round trip. netip accepts an IPv4 address only in this
// form (four decimal fields of at most 255, no leading zeros), so the host
// is the address's String: its key when it is not grouped. Anything else
// (IPv6, IPv4-mapped IPv6, zones, names) is not taken.
func dottedPeer(remote string) (string, bool) {
	fields, digits, val := 0, 0, 0
	for i := 0; i < len(remote); i++ {
		switch c := remote[i]; {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 { // a leading zero
				return "", false
			}
			if val = val*10 + int(c-'0'); val > 255 {
				return "", false
			}
			digits++
		case c == '.':
			if digits == 0 || fields == 3 {
				return "", false
			}
			fields, digits, val = fields+1, 0, 0
		case c == ':':
			if digits == 0 || fields != 3 || !validPort(remote[i+1:], false) {
				return "", false
			}
			return remote[:i], true
		default:
			return "", false
		}
	}
	return remote, digits > 0 && fields == 3
}

func (e *IPExtractor) trusts(a netip.Addr) bool {
	for _, p := range e.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fromHeader reads the configured header of a request whose peer is trusted.
func (e *IPExtractor) fromHeader(r Request) (netip.Addr, bool) {
	switch e.source {
	case sourceSingle:
		lines := r.HeaderValues(e.header)
		if len(lines) != 1 || len(lines[0]) > MaxHeaderBytes {
			return netip.Addr{}, false
		}
		return parseAddrPort(trimOWS(lines[0]), false)
	case sourceForwarded:
		return e.walkTrusted(newWalker(r.HeaderValues("Forwarded"), true))
	default:
		return e.walkTrusted(newWalker(r.HeaderValues("X-Forwarded-For"), false))
	}
}

// walkTrusted returns the rightmost address that is not trusted, or the
// leftmost address if all are trusted. Any entry that is invalid, or that has
// no address, before that point makes it fail.
func (e *IPExtractor) walkTrusted(w walker) (netip.Addr, bool) {
	var last netip.Addr
	for {
		kind, a, done := w.next()
		switch {
		case done:
			return last, last.IsValid()
		case kind != nodeAddr:
			return netip.Addr{}, false
		case !e.trusts(a):
			return a, true
		}
		last = a
	}
}

// walkHops returns the e.hops-th entry from the right.
func (e *IPExtractor) walkHops(r Request) (netip.Addr, bool) {
	w := newWalker(r.HeaderValues("X-Forwarded-For"), false)
	if e.source == sourceForwarded {
		w = newWalker(r.HeaderValues("Forwarded"), true)
	}
	for i := 1; ; i++ {
		kind, a, done := w.next()
		switch {
		case done || kind == nodeInvalid:
			return netip.Addr{}, false
		case i == e.hops:
			return a, kind == nodeAddr
		}
	}
}

// isUnixAddr reports whether a RemoteAddr names a unix socket: Go reports an
// unnamed peer as "@", an abstract socket as "@name", and a path as itself.
func isUnixAddr(s string) bool {
	return s != "" && (s[0] == '@' || s[0] == '/')
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}
