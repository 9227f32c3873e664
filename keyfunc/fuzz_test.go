package keyfunc_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/keyfunc"
)

// fuzzConfig is one extractor configuration exercised by FuzzClientIP.
type fuzzConfig struct {
	name    string
	opts    []keyfunc.IPOption
	trusted []netip.Prefix // as configured with TrustProxies
	hops    int
	unix    bool
	header  string // the header this configuration reads
}

var fuzzTrusted = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.1/32"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
}

var fuzzConfigs = []fuzzConfig{
	{name: "peer"},
	{name: "xff-cidr", opts: []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8", "127.0.0.1", "2001:db8:ffff::/48")}, trusted: fuzzTrusted, header: "X-Forwarded-For"},
	{name: "xff-hops1", opts: []keyfunc.IPOption{keyfunc.TrustHops(1)}, hops: 1, header: "X-Forwarded-For"},
	{name: "xff-hops3", opts: []keyfunc.IPOption{keyfunc.TrustHops(3)}, hops: 3, header: "X-Forwarded-For"},
	{name: "xff-unix", opts: []keyfunc.IPOption{keyfunc.TrustUnixSocket()}, unix: true, header: "X-Forwarded-For"},
	{name: "fwd-cidr", opts: []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8", "127.0.0.1", "2001:db8:ffff::/48"), keyfunc.FromForwarded()}, trusted: fuzzTrusted, header: "Forwarded"},
	{name: "fwd-hops2", opts: []keyfunc.IPOption{keyfunc.TrustHops(2), keyfunc.FromForwarded()}, hops: 2, header: "Forwarded"},
	{name: "real-cidr", opts: []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8", "127.0.0.1", "2001:db8:ffff::/48"), keyfunc.FromClientIPHeader("X-Real-IP"), keyfunc.IPv4Prefix(24), keyfunc.IPv6Prefix(48)}, trusted: fuzzTrusted, header: "X-Real-IP"},
}

// FuzzClientIP checks, for every configuration, that extraction never panics
// and that the client address is either the transport peer or an address
// written in the header the configuration reads, and the latter only when the
// peer is trusted (or a hop count is configured). For X-Forwarded-For it also
// compares the result with a plain reference implementation of the walk.
// Header arguments hold lines separated by "\n".
func FuzzClientIP(f *testing.F) {
	seeds := [][4]string{
		{"10.0.0.1:80", "198.51.100.9, 10.0.0.2", "for=198.51.100.9", "198.51.100.9"},
		{"203.0.113.7:1", "1.2.3.4", "for=1.2.3.4", "1.2.3.4"},
		{"[::ffff:10.0.0.1]:80", "::ffff:10.0.0.3, [::ffff:198.51.100.9]:80", `for="[2001:db8::1]:80", for=_x`, "[2001:db8::1]:443"},
		{"[fe80::1%eth0]:1", "fe80::2%lo\n10.0.0.9", "for=unknown\nfor=\"_gazonk\"", "garbage"},
		{"@", "198.51.100.9", "for=198.51.100.9;proto=https", ""},
		{"", "", "", ""},
		{"127.0.0.1:1", "a,,b, ,", `for="a,b";host="\"", for=1.1.1.1`, "1.1.1.1, 2.2.2.2"},
		{"10.0.0.1", "10.0.0.2\n\n10.0.0.3", `For="[2001:db8:ffff::1]";by=x, for=[2001:db8::5]`, "::1"},
		{"/tmp/sock", "01.2.3.4, 1.2.3.4:65536, [1.2.3.4]", `for=""`, " 10.0.0.1 "},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	extractors := make([]*keyfunc.IPExtractor, len(fuzzConfigs))
	for i, c := range fuzzConfigs {
		e, err := keyfunc.NewIPExtractor(c.opts...)
		if err != nil {
			f.Fatal(c.name, err)
		}
		extractors[i] = e
	}
	f.Fuzz(func(t *testing.T, remote, xffLines, fwdLines, realLines string) {
		r := keyfunc.Static{Remote: remote, Headers: map[string][]string{}}
		for name, v := range map[string]string{"X-Forwarded-For": xffLines, "Forwarded": fwdLines, "X-Real-IP": realLines} {
			if v != "" {
				r.Headers[name] = strings.Split(v, "\n")
			}
		}
		peer, peerOK := refParse(remote)
		for i, c := range fuzzConfigs {
			e := extractors[i]
			got, err := e.ClientIP(r)
			key, keyErr := e.Key(r)
			if (err == nil) != (keyErr == nil) {
				t.Fatalf("%s: ClientIP error %v but Key error %v", c.name, err, keyErr)
			}
			if err != nil {
				if !errors.Is(err, keyfunc.ErrNoKey) || !errors.Is(keyErr, keyfunc.ErrNoKey) || key != "" {
					t.Fatalf("%s: error %v, key %q, error %v", c.name, err, key, keyErr)
				}
				if peerOK {
					t.Fatalf("%s: error %v although the peer %q is an address", c.name, err, remote)
				}
				continue
			}
			if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
				t.Fatalf("%s: invalid result %v", c.name, got)
			}
			checkKey(t, c, got, key)

			headerUsable := c.hops > 0 ||
				(peerOK && inPrefixes(fuzzTrusted, peer) && len(c.trusted) > 0) ||
				(!peerOK && c.unix && (strings.HasPrefix(remote, "@") || strings.HasPrefix(remote, "/")))
			if peerOK && got == peer {
				// Falling back to the peer is always allowed.
			} else if !headerUsable || c.header == "" {
				t.Fatalf("%s: got %v, not the peer %q, from a header that must not be read", c.name, got, remote)
			} else if !appearsIn(got, r.Headers[c.header]) {
				t.Fatalf("%s: got %v, which is not the peer %q and not in %s %q", c.name, got, remote, c.header, r.Headers[c.header])
			}

			if c.header == "X-Forwarded-For" {
				want, decided := refXFF(c, remote, r.Headers["X-Forwarded-For"])
				if decided && want != got {
					t.Fatalf("%s: got %v, reference %v (peer %q, lines %q)", c.name, got, want, remote, r.Headers["X-Forwarded-For"])
				}
			}
		}
	})
}

// checkKey checks that key is got, or got's network, as configured.
func checkKey(t *testing.T, c fuzzConfig, got netip.Addr, key string) {
	t.Helper()
	v4bits, v6bits := 32, 64
	if c.name == "real-cidr" {
		v4bits, v6bits = 24, 48
	}
	bits := v6bits
	if got.Is4() {
		bits = v4bits
	}
	if bits == got.BitLen() {
		if key != got.String() {
			t.Fatalf("%s: key %q for %v", c.name, key, got)
		}
		return
	}
	p, err := netip.ParsePrefix(key)
	if err != nil || p.Bits() != bits || !p.Contains(got) || p != p.Masked() {
		t.Fatalf("%s: key %q for %v (%v)", c.name, key, got, err)
	}
}

func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// appearsIn reports whether a is written somewhere in lines: some run of
// characters between separators parses, on its own or without a trailing
// ":port", as a once its zone is dropped and IPv4-mapped addresses folded.
func appearsIn(a netip.Addr, lines []string) bool {
	isSep := func(r rune) bool { return strings.ContainsRune(",;=\"[] \t", r) }
	for _, line := range lines {
		for _, run := range strings.FieldsFunc(line, isSep) {
			cands := []string{run}
			if i := strings.LastIndexByte(run, ':'); i >= 0 {
				cands = append(cands, run[:i])
			}
			if i := strings.IndexByte(run, '%'); i >= 0 {
				cands = append(cands, run[:i])
			}
			for _, c := range cands {
				if b, err := netip.ParseAddr(c); err == nil && b.WithZone("").Unmap() == a {
					return true
				}
			}
		}
	}
	return false
}

// refParse is a reference parser for one X-Forwarded-For entry or a
// RemoteAddr, built on the standard library's own parsers.
func refParse(s string) (netip.Addr, bool) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if b, err := netip.ParseAddr(s); err == nil {
		a = b
	} else if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		b, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !b.Is6() {
			return netip.Addr{}, false
		}
		a = b
	} else {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// refXFF is a plain reference of the X-Forwarded-For walk: merge, split,
// parse everything, then walk. decided is false when the header is beyond
// the documented bounds, where only the weaker checks apply.
func refXFF(c fuzzConfig, remote string, lines []string) (want netip.Addr, decided bool) {
	peer, peerOK := refParse(remote)
	fallback := func() (netip.Addr, bool) { return peer, peerOK }
	if c.hops == 0 {
		usable := (peerOK && inPrefixes(c.trusted, peer)) ||
			(!peerOK && c.unix && (strings.HasPrefix(remote, "@") || strings.HasPrefix(remote, "/")))
		if !usable {
			return fallback()
		}
	}
	if len(lines) == 0 {
		return fallback()
	}
	joined := strings.Join(lines, ",")
	entries := strings.Split(joined, ",")
	if len(entries) > keyfunc.MaxHops || len(joined)+1 > keyfunc.MaxHeaderBytes {
		return netip.Addr{}, false
	}
	addrs := make([]netip.Addr, len(entries))
	valid := make([]bool, len(entries))
	for i, e := range entries {
		addrs[i], valid[i] = refParse(strings.Trim(e, " \t"))
	}
	if c.hops > 0 {
		n := len(entries)
		if n < c.hops {
			return fallback()
		}
		for i := n - c.hops; i < n; i++ {
			if !valid[i] {
				return fallback()
			}
		}
		return addrs[n-c.hops], true
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if !valid[i] {
			return fallback()
		}
		if !inPrefixes(c.trusted, addrs[i]) {
			return addrs[i], true
		}
	}
	return addrs[0], true
}
