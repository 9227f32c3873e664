package keyfunc_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/keyfunc"
)

// req builds a request from a peer and header lines given as name, value
// pairs; a repeated name adds a line.
func req(remote string, headers ...string) keyfunc.Static {
	r := keyfunc.Static{Remote: remote, Headers: map[string][]string{}}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers[headers[i]] = append(r.Headers[headers[i]], headers[i+1])
	}
	return r
}

const (
	xff = "X-Forwarded-For"
	fwd = "Forwarded"
)

var (
	trustCIDR = []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8", "2001:db8:ffff::/48")}
	trustFwd  = append(trustCIDR[:1:1], keyfunc.FromForwarded())
	trustReal = append(trustCIDR[:1:1], keyfunc.FromClientIPHeader("X-Real-IP"))
	trustCF   = append(trustCIDR[:1:1], keyfunc.FromClientIPHeader("CF-Connecting-IP"))
	hops1     = []keyfunc.IPOption{keyfunc.TrustHops(1)}
	hops2     = []keyfunc.IPOption{keyfunc.TrustHops(2)}
	hops2Fwd  = []keyfunc.IPOption{keyfunc.TrustHops(2), keyfunc.FromForwarded()}
	trustUnix = []keyfunc.IPOption{keyfunc.TrustUnixSocket()}
)

type ipCase struct {
	name string
	opts []keyfunc.IPOption
	r    keyfunc.Static
	ip   string // expected ClientIP; "" expects an error wrapping ErrNoKey
	key  string // expected Key; "" means the same as ip
}

func runIPCases(t *testing.T, cases []ipCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := keyfunc.NewIPExtractor(tc.opts...)
			require.NoError(t, err)
			f := keyfunc.IP(tc.opts...)

			ip, ipErr := e.ClientIP(tc.r)
			key, keyErr := e.Key(tc.r)
			fkey, fErr := f(tc.r)
			if tc.ip == "" {
				require.ErrorIs(t, ipErr, keyfunc.ErrNoKey)
				require.ErrorIs(t, keyErr, keyfunc.ErrNoKey)
				require.ErrorIs(t, fErr, keyfunc.ErrNoKey)
				require.Empty(t, key)
				require.Empty(t, fkey)
				return
			}
			require.NoError(t, ipErr)
			require.NoError(t, keyErr)
			require.NoError(t, fErr)
			require.Equal(t, tc.ip, ip.String())
			want := tc.key
			if want == "" {
				want = tc.ip
			}
			require.Equal(t, want, key)
			require.Equal(t, want, fkey)
		})
	}
}

func TestIPPeer(t *testing.T) {
	runIPCases(t, []ipCase{
		{name: "v4 with port", r: req("203.0.113.7:5555"), ip: "203.0.113.7"},
		{name: "v4 without port", r: req("203.0.113.7"), ip: "203.0.113.7"},
		{name: "v6 with port", r: req("[2001:db8:1:2:3:4:5:6]:443"), ip: "2001:db8:1:2:3:4:5:6", key: "2001:db8:1:2::/64"},
		{name: "v6 bare", r: req("2001:db8::1"), ip: "2001:db8::1", key: "2001:db8::/64"},
		{name: "v6 bracketed no port", r: req("[2001:db8::1]"), ip: "2001:db8::1", key: "2001:db8::/64"},
		{name: "v4-mapped folded", r: req("[::ffff:203.0.113.7]:80"), ip: "203.0.113.7"},
		{name: "v4-mapped bare", r: req("::ffff:203.0.113.7"), ip: "203.0.113.7"},
		{name: "zone stripped", r: req("[fe80::1%eth0]:80"), ip: "fe80::1", key: "fe80::/64"},
		{name: "zone stripped bare", r: req("fe80::1%eth0"), ip: "fe80::1", key: "fe80::/64"},
		{name: "zone containing bracket", r: req("[fe80::1%a]b]:80"), ip: "fe80::1", key: "fe80::/64"},
		{name: "loopback v6", r: req("[::1]:9"), ip: "::1", key: "::/64"},
		{name: "headers ignored without trust", r: req("203.0.113.7:1", xff, "198.51.100.1", fwd, "for=198.51.100.2", "X-Real-IP", "198.51.100.3"), ip: "203.0.113.7"},
		{name: "empty peer", r: req(""), ip: ""},
		{name: "unix unnamed peer", r: req("@"), ip: ""},
		{name: "unix path peer", r: req("/run/app.sock", xff, "198.51.100.1"), ip: ""},
		{name: "hostname peer", r: req("localhost:80"), ip: ""},
		{name: "garbage peer", r: req("not an ip"), ip: ""},
		{name: "port out of range", r: req("203.0.113.7:65536"), ip: ""},
		{name: "leading zero octet", r: req("203.0.113.07:1"), ip: ""},
		{name: "bracketed v4", r: req("[203.0.113.7]:80"), ip: ""},
		{name: "empty port", r: req("203.0.113.7:"), ip: ""},
	})
}

func TestIPXForwardedForCIDR(t *testing.T) {
	const proxy = "10.0.0.1:4000"
	runIPCases(t, []ipCase{
		{name: "single entry", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9"), ip: "198.51.100.9"},
		{name: "proxy chain", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9, 10.0.0.2, 10.1.2.3"), ip: "198.51.100.9"},
		{name: "rightmost untrusted wins", opts: trustCIDR, r: req(proxy, xff, "192.0.2.1, 198.51.100.9, 10.0.0.2"), ip: "198.51.100.9"},
		{name: "lines merged in order", opts: trustCIDR, r: req(proxy, xff, "192.0.2.1", xff, "198.51.100.9"), ip: "198.51.100.9"},
		{name: "lines merged across trusted", opts: trustCIDR, r: req(proxy, xff, "192.0.2.1, 198.51.100.9", xff, "10.0.0.2", xff, "10.0.0.3, 10.0.0.4"), ip: "198.51.100.9"},
		{name: "lowercase header name", opts: trustCIDR, r: req(proxy, "x-forwarded-for", "198.51.100.9"), ip: "198.51.100.9"},
		{name: "no header uses peer", opts: trustCIDR, r: req(proxy), ip: "10.0.0.1"},
		{name: "all trusted uses leftmost", opts: trustCIDR, r: req(proxy, xff, "10.0.0.5, 10.0.0.4"), ip: "10.0.0.5"},
		{name: "all trusted across lines", opts: trustCIDR, r: req(proxy, xff, "10.0.0.6", xff, "10.0.0.5, 10.0.0.4"), ip: "10.0.0.6"},
		{name: "whitespace and tabs", opts: trustCIDR, r: req(proxy, xff, " 198.51.100.9 ,\t10.0.0.2\t"), ip: "198.51.100.9"},
		{name: "no space after comma", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9,10.0.0.2"), ip: "198.51.100.9"},
		{name: "entry with port", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9:1234, 10.0.0.2:80"), ip: "198.51.100.9"},
		{name: "v6 entry bracketed with port", opts: trustCIDR, r: req(proxy, xff, "[2001:db8:5:6::7]:80"), ip: "2001:db8:5:6::7", key: "2001:db8:5:6::/64"},
		{name: "v6 entry bare", opts: trustCIDR, r: req(proxy, xff, "2001:db8:5:6::7"), ip: "2001:db8:5:6::7", key: "2001:db8:5:6::/64"},
		{name: "v6 entry with zone", opts: trustCIDR, r: req(proxy, xff, "fe80::1%eth0"), ip: "fe80::1", key: "fe80::/64"},
		{name: "v4-mapped entry folded", opts: trustCIDR, r: req(proxy, xff, "::ffff:198.51.100.9"), ip: "198.51.100.9"},
		{name: "v4-mapped trusted entry skipped", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9, ::ffff:10.0.0.2, [::ffff:10.0.0.3]:80"), ip: "198.51.100.9"},
		{name: "v6 trusted proxy", opts: trustCIDR, r: req("[2001:db8:ffff::1]:443", xff, "2001:db8:5:6::7, 2001:db8:ffff:1::2"), ip: "2001:db8:5:6::7", key: "2001:db8:5:6::/64"},
		{name: "v4-mapped peer trusted", opts: trustCIDR, r: req("[::ffff:10.0.0.1]:80", xff, "198.51.100.9"), ip: "198.51.100.9"},
		{name: "zoned peer trusted", opts: []keyfunc.IPOption{keyfunc.TrustProxies("fe80::/10")}, r: req("[fe80::1%eth0]:80", xff, "198.51.100.9"), ip: "198.51.100.9"},
		{name: "untrusted peer ignores header", opts: trustCIDR, r: req("192.0.2.50:1", xff, "198.51.100.9"), ip: "192.0.2.50"},
		{name: "garbage rightmost", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9, garbage"), ip: "10.0.0.1"},
		{name: "garbage behind trusted", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9, bad:ip, 10.0.0.2"), ip: "10.0.0.1"},
		{name: "garbage left of client not read", opts: trustCIDR, r: req(proxy, xff, "garbage, 198.51.100.9, 10.0.0.2"), ip: "198.51.100.9"},
		{name: "empty entry walked", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9,,10.0.0.2"), ip: "10.0.0.1"},
		{name: "trailing comma", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9, 10.0.0.2,"), ip: "10.0.0.1"},
		{name: "empty line walked", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9", xff, "", xff, "10.0.0.2"), ip: "10.0.0.1"},
		{name: "empty header", opts: trustCIDR, r: req(proxy, xff, ""), ip: "10.0.0.1"},
		{name: "unknown is garbage in XFF", opts: trustCIDR, r: req(proxy, xff, "unknown"), ip: "10.0.0.1"},
		{name: "hostname entry", opts: trustCIDR, r: req(proxy, xff, "client.example.com"), ip: "10.0.0.1"},
		{name: "leading zeros rejected", opts: trustCIDR, r: req(proxy, xff, "010.0.0.2"), ip: "10.0.0.1"},
		{name: "port out of range", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9:70000"), ip: "10.0.0.1"},
		{name: "bracketed v4 rejected", opts: trustCIDR, r: req(proxy, xff, "[198.51.100.9]"), ip: "10.0.0.1"},
		{name: "single address trusted", opts: []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.1")}, r: req(proxy, xff, "10.0.0.2"), ip: "10.0.0.2"},
		{name: "mapped prefix trusts v4", opts: []keyfunc.IPOption{keyfunc.TrustProxies("::ffff:10.0.0.0/104")}, r: req(proxy, xff, "198.51.100.9, 10.9.9.9"), ip: "198.51.100.9"},
		{name: "netip prefixes", opts: []keyfunc.IPOption{keyfunc.TrustPrefixes(netip.MustParsePrefix("10.0.0.0/8"))}, r: req(proxy, xff, "198.51.100.9, 10.0.0.2"), ip: "198.51.100.9"},
		{name: "explicit XFF", opts: append(trustCIDR[:1:1], keyfunc.FromXForwardedFor()), r: req(proxy, xff, "198.51.100.9", fwd, "for=192.0.2.1"), ip: "198.51.100.9"},
	})
}

func TestIPHops(t *testing.T) {
	runIPCases(t, []ipCase{
		{name: "two hops", opts: hops2, r: req("10.0.0.1:1", xff, "192.0.2.1, 198.51.100.9, 10.0.0.2"), ip: "198.51.100.9"},
		{name: "one hop", opts: hops1, r: req("10.0.0.1:1", xff, "192.0.2.1, 198.51.100.9"), ip: "198.51.100.9"},
		{name: "exact length", opts: hops2, r: req("10.0.0.1:1", xff, "198.51.100.9, 10.0.0.2"), ip: "198.51.100.9"},
		{name: "across lines", opts: hops2, r: req("10.0.0.1:1", xff, "192.0.2.1, 198.51.100.9", xff, "10.0.0.2"), ip: "198.51.100.9"},
		{name: "peer not checked", opts: hops1, r: req("192.0.2.77:1", xff, "198.51.100.9"), ip: "198.51.100.9"},
		{name: "unix peer", opts: hops1, r: req("@", xff, "198.51.100.9"), ip: "198.51.100.9"},
		{name: "too short falls back", opts: hops2, r: req("10.0.0.1:1", xff, "198.51.100.9"), ip: "10.0.0.1"},
		{name: "no header falls back", opts: hops2, r: req("10.0.0.1:1"), ip: "10.0.0.1"},
		{name: "too short unix peer", opts: hops2, r: req("@", xff, "198.51.100.9"), ip: ""},
		{name: "garbage in walked part", opts: hops2, r: req("10.0.0.1:1", xff, "198.51.100.9, bad"), ip: "10.0.0.1"},
		{name: "garbage at client position", opts: hops2, r: req("10.0.0.1:1", xff, "192.0.2.1, bad, 10.0.0.2"), ip: "10.0.0.1"},
		{name: "garbage beyond walked part", opts: hops2, r: req("10.0.0.1:1", xff, "bad, 198.51.100.9, 10.0.0.2"), ip: "198.51.100.9"},
		{name: "trusted-looking client kept", opts: hops1, r: req("10.0.0.1:1", xff, "10.0.0.9"), ip: "10.0.0.9"},
		{name: "forwarded two hops", opts: hops2Fwd, r: req("10.0.0.1:1", fwd, "for=192.0.2.1, for=198.51.100.9, for=10.0.0.2"), ip: "198.51.100.9"},
		{name: "forwarded obfuscated proxy skipped", opts: hops2Fwd, r: req("10.0.0.1:1", fwd, "for=198.51.100.9, for=_proxy1"), ip: "198.51.100.9"},
		{name: "forwarded element without for skipped", opts: hops2Fwd, r: req("10.0.0.1:1", fwd, "for=198.51.100.9, proto=https"), ip: "198.51.100.9"},
		{name: "forwarded unknown client", opts: hops2Fwd, r: req("10.0.0.1:1", fwd, "for=unknown, for=10.0.0.2"), ip: "10.0.0.1"},
		{name: "forwarded garbage walked", opts: hops2Fwd, r: req("10.0.0.1:1", fwd, "for=198.51.100.9, for=\"bad"), ip: "10.0.0.1"},
	})
}

func TestIPForwarded(t *testing.T) {
	const proxy = "10.0.0.1:4000"
	runIPCases(t, []ipCase{
		{name: "v4", opts: trustFwd, r: req(proxy, fwd, "for=198.51.100.9"), ip: "198.51.100.9"},
		{name: "quoted v4", opts: trustFwd, r: req(proxy, fwd, `for="198.51.100.9"`), ip: "198.51.100.9"},
		{name: "quoted v4 with port", opts: trustFwd, r: req(proxy, fwd, `for="198.51.100.9:8080"`), ip: "198.51.100.9"},
		{name: "unquoted v4 with port", opts: trustFwd, r: req(proxy, fwd, `for=198.51.100.9:8080`), ip: "198.51.100.9"},
		{name: "quoted v6 with port", opts: trustFwd, r: req(proxy, fwd, `For="[2001:db8:cafe::17]:4711"`), ip: "2001:db8:cafe::17", key: "2001:db8:cafe::/64"},
		{name: "quoted v6", opts: trustFwd, r: req(proxy, fwd, `for="[2001:db8:cafe::17]"`), ip: "2001:db8:cafe::17", key: "2001:db8:cafe::/64"},
		{name: "unquoted bracketed v6", opts: trustFwd, r: req(proxy, fwd, `for=[2001:db8:cafe::17]:80`), ip: "2001:db8:cafe::17", key: "2001:db8:cafe::/64"},
		{name: "quoted v4-mapped", opts: trustFwd, r: req(proxy, fwd, `for="[::ffff:198.51.100.9]"`), ip: "198.51.100.9"},
		{name: "obfuscated port", opts: trustFwd, r: req(proxy, fwd, `for="198.51.100.9:_p1"`), ip: "198.51.100.9"},
		{name: "other params", opts: trustFwd, r: req(proxy, fwd, "for=198.51.100.9;proto=https;by=10.0.0.1, for=10.0.0.2;host=api.example.com"), ip: "198.51.100.9"},
		{name: "spaces around pairs", opts: trustFwd, r: req(proxy, fwd, "for=198.51.100.9 ; proto=https"), ip: "198.51.100.9"},
		{name: "quoted comma in host", opts: trustFwd, r: req(proxy, fwd, `for=198.51.100.9;host="a,b", for=10.0.0.2`), ip: "198.51.100.9"},
		{name: "quoted escaped quote in host", opts: trustFwd, r: req(proxy, fwd, `for=198.51.100.9;host="a\",for=192.0.2.1"`), ip: "198.51.100.9"},
		{name: "rightmost untrusted wins", opts: trustFwd, r: req(proxy, fwd, "for=192.0.2.1, for=198.51.100.9, for=10.0.0.2"), ip: "198.51.100.9"},
		{name: "lines merged", opts: trustFwd, r: req(proxy, fwd, "for=192.0.2.1", fwd, "for=198.51.100.9"), ip: "198.51.100.9"},
		{name: "all trusted", opts: trustFwd, r: req(proxy, fwd, "for=10.0.0.3, for=10.0.0.2"), ip: "10.0.0.3"},
		{name: "XFF ignored", opts: trustFwd, r: req(proxy, xff, "192.0.2.1"), ip: "10.0.0.1"},
		{name: "unknown client", opts: trustFwd, r: req(proxy, fwd, "for=unknown"), ip: "10.0.0.1"},
		{name: "UNKNOWN client", opts: trustFwd, r: req(proxy, fwd, "for=UNKNOWN, for=10.0.0.2"), ip: "10.0.0.1"},
		{name: "obfuscated client", opts: trustFwd, r: req(proxy, fwd, `for="_gazonk"`), ip: "10.0.0.1"},
		{name: "obfuscated node behind address", opts: trustFwd, r: req(proxy, fwd, "for=198.51.100.9, for=_hidden"), ip: "10.0.0.1"},
		{name: "unknown left of client not read", opts: trustFwd, r: req(proxy, fwd, "for=unknown, for=198.51.100.9"), ip: "198.51.100.9"},
		{name: "element without for", opts: trustFwd, r: req(proxy, fwd, "proto=https"), ip: "10.0.0.1"},
		{name: "duplicate for", opts: trustFwd, r: req(proxy, fwd, "for=198.51.100.9;for=192.0.2.1"), ip: "10.0.0.1"},
		{name: "empty for", opts: trustFwd, r: req(proxy, fwd, "for="), ip: "10.0.0.1"},
		{name: "empty quoted for", opts: trustFwd, r: req(proxy, fwd, `for=""`), ip: "10.0.0.1"},
		{name: "empty element walked", opts: trustFwd, r: req(proxy, fwd, "for=198.51.100.9, , for=10.0.0.2"), ip: "10.0.0.1"},
		{name: "unterminated quote", opts: trustFwd, r: req(proxy, fwd, `for="[2001:db8::1]:80`), ip: "10.0.0.1"},
		{name: "escaped for value", opts: trustFwd, r: req(proxy, fwd, `for="\198.51.100.9"`), ip: "10.0.0.1"},
		{name: "bracketed v4", opts: trustFwd, r: req(proxy, fwd, `for="[198.51.100.9]"`), ip: "10.0.0.1"},
		{name: "unbracketed v6 with port is v6", opts: trustFwd, r: req(proxy, fwd, `for="2001:db8::17:4711"`), ip: "2001:db8::17:4711", key: "2001:db8::/64"},
		{name: "pair without equals", opts: trustFwd, r: req(proxy, fwd, "for"), ip: "10.0.0.1"},
		{name: "junk after quoted value", opts: trustFwd, r: req(proxy, fwd, `for="198.51.100.9"x`), ip: "10.0.0.1"},
		{name: "client unclosed quote not read", opts: trustFwd, r: req(proxy, fwd, `for="192.0.2.1, for=198.51.100.9`), ip: "198.51.100.9"},
		{name: "untrusted peer ignores header", opts: trustFwd, r: req("192.0.2.50:1", fwd, "for=198.51.100.9"), ip: "192.0.2.50"},
	})
}

func TestIPClientIPHeader(t *testing.T) {
	const proxy = "10.0.0.1:4000"
	runIPCases(t, []ipCase{
		{name: "trusted peer", opts: trustReal, r: req(proxy, "X-Real-IP", "198.51.100.9"), ip: "198.51.100.9"},
		{name: "lowercase name", opts: trustReal, r: req(proxy, "x-real-ip", "198.51.100.9"), ip: "198.51.100.9"},
		{name: "with port", opts: trustReal, r: req(proxy, "X-Real-IP", "198.51.100.9:443"), ip: "198.51.100.9"},
		{name: "surrounding space", opts: trustReal, r: req(proxy, "X-Real-IP", " 198.51.100.9 "), ip: "198.51.100.9"},
		{name: "v6", opts: trustCF, r: req(proxy, "CF-Connecting-IP", "2001:db8:5:6::7"), ip: "2001:db8:5:6::7", key: "2001:db8:5:6::/64"},
		{name: "v4-mapped", opts: trustCF, r: req(proxy, "CF-Connecting-IP", "::ffff:198.51.100.9"), ip: "198.51.100.9"},
		{name: "untrusted peer", opts: trustReal, r: req("192.0.2.50:1", "X-Real-IP", "198.51.100.9"), ip: "192.0.2.50"},
		{name: "absent", opts: trustReal, r: req(proxy), ip: "10.0.0.1"},
		{name: "two lines", opts: trustReal, r: req(proxy, "X-Real-IP", "192.0.2.1", "X-Real-IP", "198.51.100.9"), ip: "10.0.0.1"},
		{name: "a list", opts: trustReal, r: req(proxy, "X-Real-IP", "192.0.2.1, 198.51.100.9"), ip: "10.0.0.1"},
		{name: "garbage", opts: trustReal, r: req(proxy, "X-Real-IP", "garbage"), ip: "10.0.0.1"},
		{name: "empty", opts: trustReal, r: req(proxy, "X-Real-IP", ""), ip: "10.0.0.1"},
		{name: "XFF ignored", opts: trustReal, r: req(proxy, xff, "198.51.100.9"), ip: "10.0.0.1"},
		{name: "huge", opts: trustReal, r: req(proxy, "X-Real-IP", strings.Repeat(" ", keyfunc.MaxHeaderBytes)+"198.51.100.9"), ip: "10.0.0.1"},
	})
}

func TestIPUnixSocket(t *testing.T) {
	runIPCases(t, []ipCase{
		{name: "unnamed peer trusted", opts: trustUnix, r: req("@", xff, "198.51.100.9"), ip: "198.51.100.9"},
		{name: "path peer trusted", opts: trustUnix, r: req("/run/app.sock", xff, "198.51.100.9"), ip: "198.51.100.9"},
		{name: "abstract peer trusted", opts: trustUnix, r: req("@app", xff, "198.51.100.9"), ip: "198.51.100.9"},
		{name: "no header", opts: trustUnix, r: req("@"), ip: ""},
		{name: "garbage header", opts: trustUnix, r: req("@", xff, "garbage"), ip: ""},
		{name: "empty peer not unix", opts: trustUnix, r: req("", xff, "198.51.100.9"), ip: ""},
		{name: "tcp peer not trusted", opts: trustUnix, r: req("192.0.2.50:1", xff, "198.51.100.9"), ip: "192.0.2.50"},
		{name: "with forwarded", opts: []keyfunc.IPOption{keyfunc.TrustUnixSocket(), keyfunc.FromForwarded()}, r: req("@", fwd, `for="[2001:db8::1]:5"`), ip: "2001:db8::1", key: "2001:db8::/64"},
	})
}

func TestIPGrouping(t *testing.T) {
	v6 := req("[2001:db8:1:2ff:aaaa:bbbb:cccc:dddd]:443")
	v4 := req("203.0.113.77:80")
	runIPCases(t, []ipCase{
		{name: "v6 default /64", r: v6, ip: "2001:db8:1:2ff:aaaa:bbbb:cccc:dddd", key: "2001:db8:1:2ff::/64"},
		{name: "v6 /56", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(56)}, r: v6, ip: "2001:db8:1:2ff:aaaa:bbbb:cccc:dddd", key: "2001:db8:1:200::/56"},
		{name: "v6 /48", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(48)}, r: v6, ip: "2001:db8:1:2ff:aaaa:bbbb:cccc:dddd", key: "2001:db8:1::/48"},
		{name: "v6 /128", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(128)}, r: v6, ip: "2001:db8:1:2ff:aaaa:bbbb:cccc:dddd", key: "2001:db8:1:2ff:aaaa:bbbb:cccc:dddd"},
		{name: "v6 /1", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(1)}, r: v6, ip: "2001:db8:1:2ff:aaaa:bbbb:cccc:dddd", key: "::/1"},
		{name: "v4 default /32", r: v4, ip: "203.0.113.77"},
		{name: "v4 /24", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, r: v4, ip: "203.0.113.77", key: "203.0.113.0/24"},
		{name: "v4 /16", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(16)}, r: v4, ip: "203.0.113.77", key: "203.0.0.0/16"},
		{name: "v4 unaffected by v6 prefix", opts: []keyfunc.IPOption{keyfunc.IPv6Prefix(48)}, r: v4, ip: "203.0.113.77"},
		{name: "v6 unaffected by v4 prefix", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, r: v6, ip: "2001:db8:1:2ff:aaaa:bbbb:cccc:dddd", key: "2001:db8:1:2ff::/64"},
		{name: "v4-mapped grouped as v4", opts: []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, r: req("[::ffff:203.0.113.77]:80"), ip: "203.0.113.77", key: "203.0.113.0/24"},
		{name: "v4 from header grouped", opts: append(trustCIDR[:1:1], keyfunc.IPv4Prefix(24)), r: req("10.0.0.1:1", xff, "198.51.100.9"), ip: "198.51.100.9", key: "198.51.100.0/24"},
	})
}

func TestIPBounds(t *testing.T) {
	const proxy = "10.0.0.1:4000"
	trusted := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = "10.0.0." + string(rune('0'+i%10))
		}
		return strings.Join(parts, ", ")
	}
	runIPCases(t, []ipCase{
		{name: "MaxHops trusted entries use leftmost", opts: trustCIDR, r: req(proxy, xff, "10.9.9.9, "+trusted(keyfunc.MaxHops-1)), ip: "10.9.9.9"},
		{name: "client at MaxHops", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9, "+trusted(keyfunc.MaxHops-1)), ip: "198.51.100.9"},
		{name: "client beyond MaxHops", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9, "+trusted(keyfunc.MaxHops)), ip: "10.0.0.1"},
		{name: "too many trusted entries", opts: trustCIDR, r: req(proxy, xff, trusted(keyfunc.MaxHops+1)), ip: "10.0.0.1"},
		{name: "too many lines", opts: trustCIDR, r: req(proxy, append([]string{xff, "198.51.100.9"}, strings.Split(strings.Repeat(xff+"\x0010.0.0.2\x00", keyfunc.MaxHops), "\x00")...)...), ip: "10.0.0.1"},
		{name: "huge client-written prefix not read", opts: trustCIDR, r: req(proxy, xff, strings.Repeat("x", 1<<20)+", 198.51.100.9, 10.0.0.2"), ip: "198.51.100.9"},
		{name: "huge entry in walked part", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9,"+strings.Repeat(" ", keyfunc.MaxHeaderBytes)+"10.0.0.2"), ip: "10.0.0.1"},
		{name: "walk beyond MaxHeaderBytes", opts: trustCIDR, r: req(proxy, xff, "198.51.100.9,"+strings.Repeat(" ", keyfunc.MaxHeaderBytes/2)+"10.0.0.2,"+strings.Repeat(" ", keyfunc.MaxHeaderBytes/2)+"10.0.0.3"), ip: "10.0.0.1"},
		{name: "huge forwarded prefix not read", opts: trustFwd, r: req(proxy, fwd, `for="`+strings.Repeat(`\"`, 1<<18)+`", for=198.51.100.9`), ip: "198.51.100.9"},
		{name: "huge forwarded element walked", opts: trustFwd, r: req(proxy, fwd, `for=198.51.100.9, for=10.0.0.2;host="`+strings.Repeat("a", keyfunc.MaxHeaderBytes)+`"`), ip: "10.0.0.1"},
		{name: "backslash run crossing the bound", opts: trustFwd, r: req(proxy, fwd, `for=10.0.0.2;host="`+strings.Repeat(`\\`, keyfunc.MaxHeaderBytes)+`"`), ip: "10.0.0.1"},
		{name: "hops beyond header bytes", opts: hops2, r: req(proxy, xff, "198.51.100.9,"+strings.Repeat(" ", keyfunc.MaxHeaderBytes)+"10.0.0.2"), ip: "10.0.0.1"},
	})
}

// TestSpoofing covers the attacks trusted-proxy handling exists to stop.
func TestSpoofing(t *testing.T) {
	const attacker = "192.0.2.66"
	t.Run("direct client forging every header keeps its own bucket", func(t *testing.T) {
		for _, opts := range [][]keyfunc.IPOption{nil, trustCIDR, trustFwd, trustReal, trustUnix} {
			f := keyfunc.IP(opts...)
			for _, r := range []keyfunc.Static{
				req(attacker+":5000", xff, "198.51.100.1"),
				req(attacker+":5000", xff, "10.0.0.1"),
				req(attacker+":5000", xff, "198.51.100.1", xff, "198.51.100.2"),
				req(attacker+":5000", fwd, "for=198.51.100.1"),
				req(attacker+":5000", fwd, `for="[2001:db8::1]"`),
				req(attacker+":5000", "X-Real-IP", "198.51.100.1"),
				req(attacker+":5000", "CF-Connecting-IP", "198.51.100.1", "True-Client-IP", "198.51.100.2"),
			} {
				key, err := f(r)
				require.NoError(t, err)
				require.Equal(t, attacker, key, "headers %v", r.Headers)
			}
		}
	})
	t.Run("forged entries ahead of a trusted proxy are ignored", func(t *testing.T) {
		// The client sent its own header; the proxy at 10.0.0.1 appended the
		// address it saw, on the same line or on a new one.
		cases := []struct {
			opts []keyfunc.IPOption
			r    keyfunc.Static
		}{
			{trustCIDR, req("10.0.0.1:1", xff, "198.51.100.1, 198.51.100.2, "+attacker)},
			{trustCIDR, req("10.0.0.1:1", xff, "198.51.100.1", xff, attacker)},
			{trustCIDR, req("10.0.0.1:1", xff, "10.0.0.7, "+attacker)},
			{trustCIDR, req("10.0.0.1:1", xff, "::ffff:10.0.0.7, "+attacker)},
			{trustCIDR, req("10.0.0.1:1", xff, "garbage, "+attacker)},
			{trustCIDR, req("10.0.0.1:1", xff, strings.Repeat("198.51.100.1, ", 500)+attacker)},
			{trustFwd, req("10.0.0.1:1", fwd, "for=198.51.100.1, for="+attacker)},
			{trustFwd, req("10.0.0.1:1", fwd, `for="198.51.100.1, for=`+attacker)},
			{trustFwd, req("10.0.0.1:1", fwd, `for=198.51.100.1;host="x`, fwd, "for="+attacker)},
			{hops2, req("10.0.0.1:1", xff, "198.51.100.1, "+attacker+", 10.0.0.2")},
			{hops2Fwd, req("10.0.0.1:1", fwd, "for=198.51.100.1, for="+attacker+", for=10.0.0.2")},
		}
		for _, tc := range cases {
			f := keyfunc.IP(tc.opts...)
			key, err := f(tc.r)
			require.NoError(t, err)
			require.Equal(t, attacker, key, "headers %v", tc.r.Headers)
		}
	})
	t.Run("a forged single-value header behind a proxy that does not overwrite it", func(t *testing.T) {
		// The client sent X-Real-IP and the proxy added its own line: two
		// lines are ambiguous, so the extractor falls back to the proxy.
		f := keyfunc.IP(trustReal...)
		key, err := f(req("10.0.0.1:1", "X-Real-IP", "198.51.100.1", "X-Real-IP", attacker))
		require.NoError(t, err)
		require.Equal(t, "10.0.0.1", key)
	})
}

func TestNewIPExtractorErrors(t *testing.T) {
	cases := []struct {
		name string
		opts []keyfunc.IPOption
		want string // the error names the option
	}{
		{"bad CIDR", []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/33")}, "TrustProxies"},
		{"bad address", []keyfunc.IPOption{keyfunc.TrustProxies("proxy.internal")}, "TrustProxies"},
		{"empty string", []keyfunc.IPOption{keyfunc.TrustProxies("")}, "TrustProxies"},
		{"zone", []keyfunc.IPOption{keyfunc.TrustProxies("fe80::1%eth0")}, "TrustProxies"},
		{"wide mapped prefix", []keyfunc.IPOption{keyfunc.TrustProxies("::ffff:0.0.0.0/80")}, "TrustProxies"},
		{"zero prefix", []keyfunc.IPOption{keyfunc.TrustPrefixes(netip.Prefix{})}, "TrustPrefixes"},
		{"negative hops", []keyfunc.IPOption{keyfunc.TrustHops(-1)}, "TrustHops"},
		{"too many hops", []keyfunc.IPOption{keyfunc.TrustHops(keyfunc.MaxHops + 1)}, "TrustHops"},
		{"hops and CIDRs", []keyfunc.IPOption{keyfunc.TrustHops(1), keyfunc.TrustProxies("10.0.0.0/8")}, "TrustHops"},
		{"hops and unix", []keyfunc.IPOption{keyfunc.TrustUnixSocket(), keyfunc.TrustHops(1)}, "TrustHops"},
		{"hops and single header", []keyfunc.IPOption{keyfunc.TrustHops(1), keyfunc.FromClientIPHeader("X-Real-IP")}, "FromClientIPHeader"},
		{"empty header name", []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromClientIPHeader("")}, "FromClientIPHeader"},
		{"bad header name", []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromClientIPHeader("X Real IP")}, "FromClientIPHeader"},
		{"XFF as single", []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromClientIPHeader("x-forwarded-for")}, "FromXForwardedFor"},
		{"Forwarded as single", []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromClientIPHeader("Forwarded")}, "FromForwarded"},
		{"XFF without trust", []keyfunc.IPOption{keyfunc.FromXForwardedFor()}, "FromXForwardedFor"},
		{"Forwarded with zero hops", []keyfunc.IPOption{keyfunc.TrustHops(0), keyfunc.FromForwarded()}, "FromForwarded"},
		{"single without trust", []keyfunc.IPOption{keyfunc.FromClientIPHeader("X-Real-IP")}, "FromClientIPHeader"},
		{"v6 prefix 0", []keyfunc.IPOption{keyfunc.IPv6Prefix(0)}, "IPv6Prefix"},
		{"v6 prefix 129", []keyfunc.IPOption{keyfunc.IPv6Prefix(129)}, "IPv6Prefix"},
		{"v4 prefix 0", []keyfunc.IPOption{keyfunc.IPv4Prefix(0)}, "IPv4Prefix"},
		{"v4 prefix 33", []keyfunc.IPOption{keyfunc.IPv4Prefix(33)}, "IPv4Prefix"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := keyfunc.NewIPExtractor(tc.opts...)
			require.Error(t, err)
			require.Nil(t, e)
			require.Contains(t, err.Error(), tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "keyfunc: "), err.Error())
			// IP panics with the same error: a constructor mistake in code.
			require.PanicsWithError(t, err.Error(), func() { keyfunc.IP(tc.opts...) })
		})
	}

	t.Run("every error is reported", func(t *testing.T) {
		_, err := keyfunc.NewIPExtractor(keyfunc.TrustProxies("bad1", "10.0.0.0/8", "bad2"), keyfunc.IPv6Prefix(0))
		require.ErrorContains(t, err, `"bad1"`)
		require.ErrorContains(t, err, `"bad2"`)
		require.ErrorContains(t, err, "IPv6Prefix")
	})
}

func TestIPExtractorValidConfigs(t *testing.T) {
	for _, opts := range [][]keyfunc.IPOption{
		nil,
		{nil},
		{keyfunc.TrustHops(0)},
		{keyfunc.TrustProxies()},
		{keyfunc.TrustHops(keyfunc.MaxHops), keyfunc.FromForwarded()},
		{keyfunc.TrustHops(3), keyfunc.TrustHops(0), keyfunc.TrustProxies("10.0.0.0/8")}, // last TrustHops wins
		{keyfunc.TrustProxies("0.0.0.0/1", "128.0.0.0/2", "::/1", "8000::/2")},           // half and a quarter: not everything
		{keyfunc.TrustUnixSocket(), keyfunc.FromClientIPHeader("X-Real-IP")},
		{keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromClientIPHeader("X-Real-IP"), keyfunc.FromXForwardedFor()}, // last source wins
		{keyfunc.IPv4Prefix(1), keyfunc.IPv4Prefix(32), keyfunc.IPv6Prefix(1), keyfunc.IPv6Prefix(128)},
	} {
		_, err := keyfunc.NewIPExtractor(opts...)
		require.NoError(t, err)
	}
}

func TestIPExtractorZeroValue(t *testing.T) {
	var e keyfunc.IPExtractor
	key, err := e.Key(req("[2001:db8:1:2:3:4:5:6]:1", xff, "198.51.100.1"))
	require.NoError(t, err)
	require.Equal(t, "2001:db8:1:2::/64", key)
	key, err = e.Key(req("203.0.113.7:1"))
	require.NoError(t, err)
	require.Equal(t, "203.0.113.7", key)
}

func TestIPLastSourceWins(t *testing.T) {
	f := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromClientIPHeader("X-Real-IP"), keyfunc.FromXForwardedFor())
	key, err := f(req("10.0.0.1:1", xff, "198.51.100.9", "X-Real-IP", "192.0.2.1"))
	require.NoError(t, err)
	require.Equal(t, "198.51.100.9", key)
}

func TestIPNoKeyErrorText(t *testing.T) {
	f := keyfunc.IP()
	_, err := f(req(strings.Repeat("x", 1000)))
	require.ErrorIs(t, err, keyfunc.ErrNoKey)
	require.True(t, strings.HasPrefix(err.Error(), "keyfunc: "))
	require.Less(t, len(err.Error()), 300, "the peer is truncated in the message")
}

func TestStaticRequest(t *testing.T) {
	var zero keyfunc.Static
	require.NotNil(t, zero.Context())
	require.Empty(t, zero.Header("X"))
	require.Nil(t, zero.HeaderValues("X"))
	require.Empty(t, zero.Query("q"))

	r := keyfunc.Static{
		MethodName: "GET", RouteName: "/users/:id", PathName: "/users/7",
		Headers: map[string][]string{"X-Api-Key": {"k1", "k2"}, "grpc-meta": {"m"}},
		Queries: map[string]string{"key": "q1"},
		Remote:  "192.0.2.1:1",
	}
	var _ keyfunc.Request = &r
	require.Equal(t, "GET", r.Method())
	require.Equal(t, "/users/:id", r.Route())
	require.Equal(t, "/users/7", r.Path())
	require.Equal(t, "k1", r.Header("X-Api-Key"))
	require.Equal(t, "k1", r.Header("x-api-key"))
	require.Equal(t, []string{"k1", "k2"}, r.HeaderValues("X-API-KEY"))
	require.Equal(t, "m", r.Header("Grpc-Meta"))
	require.Equal(t, "q1", r.Query("key"))
	require.Empty(t, r.Query("KEY"))
	require.Equal(t, "192.0.2.1:1", r.RemoteAddr())
}

// A dotted-quad peer is keyed by the host part of RemoteAddr itself, with
// no allocation; every other form goes through netip. Either way the key is
// the ClientIP's String, and an invalid peer has no key.
func TestIPKeyOfDottedPeers(t *testing.T) {
	configs := map[string][]keyfunc.IPOption{
		"peer only":         nil,
		"untrusted peer":    {keyfunc.TrustProxies("10.0.0.0/8")},
		"grouped by /24":    {keyfunc.IPv4Prefix(24)},
		"whole IPv4 by /32": {keyfunc.IPv4Prefix(32)},
	}
	cases := []struct {
		remote  string
		key     string // with IPv4 keyed whole; "" for no key
		noAlloc bool
	}{
		{"203.0.113.7:52310", "203.0.113.7", true},
		{"203.0.113.7", "203.0.113.7", true},
		{"0.0.0.0:0", "0.0.0.0", true},
		{"255.255.255.255:65535", "255.255.255.255", true},
		{"192.0.2.1:0080", "192.0.2.1", true},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1", false},
		{"::ffff:192.0.2.1", "192.0.2.1", false},
		{"[2001:db8::1]:443", "2001:db8::/64", false},
		{"01.2.3.4:80", "", false},
		{"1.2.3.4:65536", "", false},
		{"1.2.3.4:", "", false},
		{"1.2.3.4:8x", "", false},
		{"1.2.3.4:80:80", "", false},
		{"256.1.1.1:80", "", false},
		{"1.2.3:80", "", false},
		{"1.2.3.4.5:80", "", false},
		{"1..2.3:80", "", false},
		{".1.2.3:80", "", false},
		{"1.2.3.:80", "", false},
		{"1.2.3.4%eth0:80", "", false},
		{"", "", false},
		{"@", "", false},
		{"example.com:80", "", false},
	}
	for name, opts := range configs {
		e, err := keyfunc.NewIPExtractor(opts...)
		require.NoError(t, err)
		for _, tc := range cases {
			r := keyfunc.Static{Remote: tc.remote}
			key, err := e.Key(r)
			a, ipErr := e.ClientIP(r)
			if tc.key == "" {
				require.ErrorIs(t, err, keyfunc.ErrNoKey, "%s: %q", name, tc.remote)
				require.ErrorIs(t, ipErr, keyfunc.ErrNoKey, "%s: %q", name, tc.remote)
				continue
			}
			require.NoError(t, err, "%s: %q", name, tc.remote)
			require.NoError(t, ipErr)
			want := tc.key
			if name == "grouped by /24" && a.Is4() {
				want = netip.PrefixFrom(a, 24).Masked().String()
			}
			require.Equal(t, want, key, "%s: %q", name, tc.remote)
			if a.Is4() && name != "grouped by /24" {
				require.Equal(t, a.String(), key)
			}
			if tc.noAlloc && name != "grouped by /24" {
				var rq keyfunc.Request = &r // boxed once, outside the count
				require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = e.Key(rq) }), "%s: %q", name, tc.remote)
			}
		}
	}
}
