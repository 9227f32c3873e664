package fiberlimit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/sluicehq/sluice/keyfunc"
)

// request is the keyfunc.Request view of a *fiber.Ctx: one pointer, so it
// fits an interface without an allocation. Its strings alias fasthttp's
// buffers, valid until the handler returns (see the package documentation).
type request fiber.Ctx

func (r *request) ctx() *fiber.Ctx { return (*fiber.Ctx)(r) }

// Context is c.UserContext(): never the pooled *fasthttp.RequestCtx.
func (r *request) Context() context.Context { return r.ctx().UserContext() }
func (r *request) Method() string           { return r.ctx().Method() }

// Route is the template of the route the middleware runs on ("/users/:id");
// under app.Use, the Use prefix.
func (r *request) Route() string { return r.ctx().Route().Path }

// Path is the path as Fiber's router matches it: c.Path() (decoded when
// Config.UnescapePath is set), in lower case unless Config.CaseSensitive,
// without trailing slashes unless Config.StrictRouting. Fiber routes
// "/LOGIN" and "/login/" to "/login" by default, so a route policy must see
// "/login" for both; write Match.Routes in lower case for such an app.
func (r *request) Path() string {
	c := r.ctx()
	p := c.Path()
	cfg := c.App().Config()
	if !cfg.StrictRouting {
		for len(p) > 1 && p[len(p)-1] == '/' {
			p = p[:len(p)-1]
		}
	}
	if !cfg.CaseSensitive {
		for i := 0; i < len(p); i++ {
			if 'A' <= p[i] && p[i] <= 'Z' {
				return lowerASCII(p, i)
			}
		}
	}
	return p
}

func (r *request) Header(name string) string {
	c := r.ctx()
	if v := c.Request().Header.Peek(name); v != nil {
		return utils.UnsafeString(v)
	}
	if v := r.scan(name, 1); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (r *request) HeaderValues(name string) []string {
	c := r.ctx()
	lines := c.Request().Header.PeekAll(name) // fasthttp's scratch slice: convert now
	if len(lines) == 0 {
		return r.scan(name, -1)
	}
	vals := make([]string, len(lines))
	for i, v := range lines {
		vals[i] = utils.UnsafeString(v)
	}
	return vals
}

// scan finds up to n (all if n < 0) lines of the header name ignoring case,
// for apps with DisableHeaderNormalizing, where fasthttp's lookups are exact.
func (r *request) scan(name string, n int) []string {
	c := r.ctx()
	if !c.App().Config().DisableHeaderNormalizing {
		return nil
	}
	var vals []string
	c.Request().Header.VisitAll(func(k, v []byte) {
		if len(vals) != n && strings.EqualFold(utils.UnsafeString(k), name) {
			vals = append(vals, utils.UnsafeString(v))
		}
	})
	return vals
}

func (r *request) Query(name string) string {
	return utils.UnsafeString(r.ctx().Context().QueryArgs().Peek(name))
}

// RemoteAddr is the transport peer, in a new string. A TCP address, the
// common case, is formatted with one allocation instead of the three of
// net.TCPAddr.String, and reads the same.
func (r *request) RemoteAddr() string {
	a := r.ctx().Context().RemoteAddr()
	if t, ok := a.(*net.TCPAddr); ok && t.Zone == "" {
		if ip, ok := netip.AddrFromSlice(t.IP); ok {
			var buf [48]byte
			return string(netip.AddrPortFrom(ip.Unmap(), uint16(t.Port)).AppendTo(buf[:0]))
		}
	}
	return a.String()
}

// Request returns the keyfunc.Request view of c, for key functions used
// outside the middleware. Its strings are valid only until the handler
// returns.
func Request(c *fiber.Ctx) keyfunc.Request { return (*request)(c) }

// IP returns a key function that keys a request by Fiber's c.IP(), falling
// back to the transport peer's IP when that is empty.
//
// WARNING: c.IP() is spoofable with Fiber's defaults. When Config.ProxyHeader
// is set and Config.EnableTrustedProxyCheck is false (its default), c.IP()
// returns that header for every request, from whoever sent it. With
// ProxyHeader "X-Forwarded-For" it is the raw header value, or with
// EnableIPValidation its leftmost valid address: the entry the client wrote
// itself. A client can then choose a fresh bucket for every request and is
// never limited. Use IP only with EnableTrustedProxyCheck and TrustedProxies
// listing your proxies, and a ProxyHeader that they overwrite (X-Real-IP).
// Otherwise use keyfunc.IP, which reads the transport peer and walks
// forwarding headers from the right through proxies you declare. IP does not
// group IPv6 clients by network as keyfunc.IP does.
//
// The Func works only on requests of this package's middleware.
func IP() keyfunc.Func {
	return func(kr keyfunc.Request) (string, error) {
		r, ok := kr.(*request)
		if !ok {
			return "", errors.New("fiberlimit: IP: not a request of the fiberlimit middleware")
		}
		c := r.ctx()
		// Like the other view strings, c.IP() may alias the header buffer;
		// core copies the identity into the store key.
		if ip := c.IP(); ip != "" {
			return ip, nil
		}
		return c.Context().RemoteIP().String(), nil
	}
}

// lowerASCII returns p with ASCII letters in lower case, as Fiber's router
// folds paths (utils.ToLowerBytes); p[:i] has none in upper case.
func lowerASCII(p string, i int) string {
	b := []byte(p)
	for ; i < len(b); i++ {
		if 'A' <= b[i] && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}
