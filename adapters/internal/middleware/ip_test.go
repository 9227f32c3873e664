package middleware

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/keyfunc"
)

// FrameworkIP groups a framework's client address as keyfunc.IP groups a
// peer, and falls back to the peer for a value that is not an address.
func TestFrameworkIP(t *testing.T) {
	r := &keyfunc.Static{Remote: "192.0.2.1:4000"}
	for ip, want := range map[string]string{
		"203.0.113.7":               "203.0.113.7",
		"::ffff:203.0.113.7":        "203.0.113.7",
		"2001:db8:1:2:3:4:5:6":      "2001:db8:1:2::/64",
		"fe80::1%eth0":              "fe80::/64",
		"":                          "192.0.2.1",
		"203.0.113.7, 198.51.100.1": "192.0.2.1",
		"not an address":            "192.0.2.1",
	} {
		got, err := FrameworkIP(r, ip)
		require.NoError(t, err, ip)
		require.Equal(t, want, got, ip)
	}
	_, err := FrameworkIP(&keyfunc.Static{Remote: "@"}, "")
	require.ErrorIs(t, err, keyfunc.ErrNoKey, "no address at all")
}

func TestAddrString(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 80},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"},
		&net.UnixAddr{Name: "@", Net: "unix"},
		(*net.TCPAddr)(nil), // a typed nil: its String, never a panic
	} {
		require.Equal(t, a.String(), AddrString(a))
	}
	a := &net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 80}
	require.LessOrEqual(t, testing.AllocsPerRun(100, func() { AddrString(a) }), 1.0)
}

// PeerAddr is what keyfunc reads from AddrString's text, so a view's
// PeerRequest keys every peer as its RemoteAddr does.
func TestPeerAddr(t *testing.T) {
	f := keyfunc.IP(keyfunc.IPv6Prefix(128))
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 80},
		&net.TCPAddr{IP: net.ParseIP("203.0.113.7").To4(), Port: 80},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"},
		&net.TCPAddr{IP: net.IPv4zero, Port: 0},
		&net.TCPAddr{IP: nil, Port: 80},
		(*net.TCPAddr)(nil),
		&net.UDPAddr{IP: net.ParseIP("203.0.113.7"), Port: 80},
		&net.UnixAddr{Name: "@", Net: "unix"},
	} {
		want, wantErr := f(&keyfunc.Static{Remote: AddrString(a)})
		got, gotErr := f(peerView{a: a})
		if wantErr != nil {
			require.ErrorIs(t, gotErr, keyfunc.ErrNoKey, a.String())
			continue
		}
		require.NoError(t, gotErr, a.String())
		require.Equal(t, want, got, a.String())
	}
}

// peerView is a view whose peer is a, as Fiber's: RemoteAddr formats it,
// PeerAddr reads it.
type peerView struct {
	keyfunc.Static
	a net.Addr
}

func (v peerView) RemoteAddr() string           { return AddrString(v.a) }
func (v peerView) PeerAddr() (netip.Addr, bool) { return PeerAddr(conn{v.a}) }

// conn is a connection from a.
type conn struct{ a net.Addr }

func (c conn) RemoteAddr() net.Addr { return c.a }
