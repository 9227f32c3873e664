package middleware

import (
	"errors"
	"net"
	"net/netip"

	"github.com/sluicehq/sluice/keyfunc"
)

// FrameworkIP is the key of ip, a framework's own idea of the client
// address (gin's c.ClientIP(), Echo's c.RealIP(), Fiber's c.IP()), grouped
// as keyfunc.IP groups a peer: IPv4 whole, IPv6 by /64, IPv4-mapped
// addresses folded and zones dropped. A value that is not an IP address
// falls back to r's transport peer.
func FrameworkIP(r keyfunc.Request, ip string) (string, error) {
	var peer keyfunc.IPExtractor // the transport peer only, default grouping
	if k, err := peer.Key(addrAs{r, ip}); err == nil {
		return k, nil
	}
	return peer.Key(r)
}

// addrAs is r with ip as its transport peer.
type addrAs struct {
	keyfunc.Request
	ip string
}

func (a addrAs) RemoteAddr() string { return a.ip }

// AddrString is a.String() in a new string: a TCP address, the common
// case, is formatted with one allocation instead of the three of
// net.TCPAddr.String, and reads the same.
func AddrString(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok && t != nil && t.Zone == "" {
		if ip, ok := netip.AddrFromSlice(t.IP); ok {
			var buf [48]byte
			return string(netip.AddrPortFrom(ip.Unmap(), uint16(t.Port)).AppendTo(buf[:0]))
		}
	}
	return a.String()
}

// PeerAddr is the IP address of c's peer when it is a TCP peer, for a
// view's keyfunc.PeerRequest: the host AddrString(c.RemoteAddr()) writes,
// unmapped and without its zone, as keyfunc parses it; ok is false for any
// other address.
func PeerAddr(c interface{ RemoteAddr() net.Addr }) (netip.Addr, bool) {
	if t, ok := c.RemoteAddr().(*net.TCPAddr); ok && t != nil {
		if ip, ok := netip.AddrFromSlice(t.IP); ok {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// KeyFunc returns a key function over a framework's request value, which
// get finds behind a request's view (an adapter's Context): f receives the
// view and that value. On a request of another adapter it fails with an
// error naming the adapter's package and the function ("ginlimit",
// "KeyFunc").
func KeyFunc[C any](pkg, fn string, get func(keyfunc.Request) (C, bool), f func(keyfunc.Request, C) (string, error)) keyfunc.Func {
	errOther := errors.New(pkg + ": " + fn + ": not a request of the " + pkg + " middleware")
	return func(r keyfunc.Request) (string, error) {
		c, ok := get(r)
		if !ok {
			return "", errOther
		}
		return f(r, c)
	}
}

// As returns get(v) when r is a view of type V (an adapter's), for an
// adapter's accessor from a keyfunc.Request to its framework's request.
func As[V keyfunc.Request, C any](r keyfunc.Request, get func(V) C) (c C, ok bool) {
	v, ok := r.(V)
	if ok {
		c = get(v)
	}
	return c, ok
}
