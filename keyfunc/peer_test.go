package keyfunc_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/keyfunc"
)

// peerReq is a request that gives its peer as an address too.
type peerReq struct {
	keyfunc.Static
	addr netip.Addr
	ok   bool
}

func (r peerReq) PeerAddr() (netip.Addr, bool) { return r.addr, r.ok }

// IP reads a PeerRequest's PeerAddr instead of RemoteAddr, for every
// option that reads the peer, and RemoteAddr when PeerAddr has none.
func TestIPPeerRequest(t *testing.T) {
	v4, v6 := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8:1:2:3:4:5:6")
	proxy := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		name string
		opts []keyfunc.IPOption
		r    peerReq
		key  string // "" expects ErrNoKey
	}{
		{"IPv4", nil, peerReq{keyfunc.Static{Remote: "192.0.2.1:1"}, v4, true}, "203.0.113.7"},
		{"IPv6 grouped", nil, peerReq{keyfunc.Static{Remote: "192.0.2.1:1"}, v6, true}, "2001:db8:1:2::/64"},
		{"IPv4 grouped", []keyfunc.IPOption{keyfunc.IPv4Prefix(24)}, peerReq{keyfunc.Static{Remote: "192.0.2.1:1"}, v4, true}, "203.0.113.0/24"},
		{"no address: RemoteAddr", nil, peerReq{keyfunc.Static{Remote: "192.0.2.1:1"}, netip.Addr{}, false}, "192.0.2.1"},
		{"no address at all", nil, peerReq{keyfunc.Static{Remote: "@"}, netip.Addr{}, false}, ""},
		{"trusted proxy", trustCIDR, peerReq{req("192.0.2.1:1", xff, "198.51.100.9"), proxy, true}, "198.51.100.9"},
		{"untrusted peer", trustCIDR, peerReq{req("10.0.0.1:1", xff, "198.51.100.9"), v4, true}, "203.0.113.7"},
		{"hops", hops1, peerReq{req("192.0.2.1:1", xff, "198.51.100.9"), v4, true}, "198.51.100.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := keyfunc.IP(tc.opts...)(tc.r)
			if tc.key == "" {
				require.ErrorIs(t, err, keyfunc.ErrNoKey)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.key, key)
		})
	}
}

// The key of a PeerRequest's address takes one allocation (its text), as
// RemoteAddr's host takes none.
func TestIPPeerRequestAllocs(t *testing.T) {
	f := keyfunc.IP()
	r := &peerReq{keyfunc.Static{Remote: "192.0.2.1:1"}, netip.MustParseAddr("203.0.113.7"), true}
	var key string
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { key, _ = f(r) }))
	require.Equal(t, "203.0.113.7", key)
}

// textReq is a PeerRequest that holds its peer's text too.
type textReq struct {
	peerReq
	text  string
	calls *int
}

func (r textReq) PeerText() (string, bool) { *r.calls++; return r.text, r.ok }

// IP keys a PeerTextRequest's IPv4 peer, when it keys by the whole peer,
// with PeerText, without an allocation; every other key is IP's own, as
// for a PeerRequest.
func TestIPPeerTextRequest(t *testing.T) {
	v4, v6 := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8:1:2:3:4:5:6")
	var calls int
	// A text IP never writes, so that the test sees which one IP used.
	held := func(a netip.Addr, ok bool) textReq {
		return textReq{peerReq{keyfunc.Static{Remote: "192.0.2.1:1"}, a, ok}, "held:" + a.String(), &calls}
	}
	f := keyfunc.IP()
	r := held(v4, true)
	var key string
	require.Zero(t, testing.AllocsPerRun(100, func() { key, _ = f(&r) }))
	require.Equal(t, "held:203.0.113.7", key)
	require.Positive(t, calls)

	calls = 0
	key, err := f(held(v6, true))
	require.NoError(t, err)
	require.Equal(t, "2001:db8:1:2::/64", key, "an IPv6 peer is grouped")
	key, err = keyfunc.IP(keyfunc.IPv4Prefix(24))(held(v4, true))
	require.NoError(t, err)
	require.Equal(t, "203.0.113.0/24", key, "a grouped IPv4 peer")
	key, err = f(held(netip.Addr{}, false))
	require.NoError(t, err)
	require.Equal(t, "192.0.2.1", key, "no address: RemoteAddr")
	key, err = keyfunc.IP(hops1...)(textReq{peerReq{req("192.0.2.1:1", xff, "198.51.100.9"), v4, true}, "held", &calls})
	require.NoError(t, err)
	require.Equal(t, "198.51.100.9", key, "through a proxy")
	require.Zero(t, calls, "PeerText only for a whole IPv4 peer")
}
