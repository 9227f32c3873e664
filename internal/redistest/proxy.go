package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy between a client and a server (Redis,
// PostgreSQL: any TCP protocol) that injects faults on demand: added
// latency on every reply, dropped connections (all closed at once), stalls
// (a black-holed network: bytes stop flowing, the connections stay open,
// nothing is closed, neither FIN nor RST crosses) and their two ends: a
// short partition heals (Resume: what was held is delivered) and a long
// one leaves connections dead on one side (Sever). It starts one goroutine
// per listener and two per connection, all ended by Close (registered as a
// test cleanup).
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener
	done   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	links   map[*link]struct{}
	latency time.Duration
	open    chan struct{} // closed while bytes flow; a fresh open channel while stalled
}

// link is one proxied connection: the client's side and the server's.
type link struct {
	client, server net.Conn
	// severed: the server side is gone (Sever); the client side stays
	// open until it sends something or closes.
	severed atomic.Bool
}

// NewProxy listens on a free 127.0.0.1 port and forwards every
// connection to target.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p := &Proxy{
		Addr: ln.Addr().String(), target: target, ln: ln,
		done: make(chan struct{}), links: map[*link]struct{}{}, open: make(chan struct{}),
	}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // Close
		}
		server, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			client.Close()
			continue // the server is down: the client sees its connection closed
		}
		l := &link{client: client, server: server}
		if !p.track(l) {
			return
		}
		p.wg.Add(2)
		go p.pump(l, true)
		go p.pump(l, false)
	}
}

// track registers a link, or closes it if the proxy is closed.
func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		l.client.Close()
		l.server.Close()
		return false
	default:
	}
	p.links[l] = struct{}{}
	return true
}

// pump copies one direction of l (toServer: the client's bytes to the
// server; else the replies, delayed by the current latency), holding every
// chunk while the proxy is stalled, and holding an end of either side too:
// a stalled network carries no FIN. When either side ends, both are
// closed, except on a severed link: its client side then stays open, and
// its first bytes reset it.
func (p *Proxy) pump(l *link, toServer bool) {
	defer p.wg.Done()
	src, dst := l.server, l.client
	if toServer {
		src, dst = l.client, l.server
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open, lat := p.open, p.latency
			p.mu.Unlock()
			if !toServer && lat > 0 {
				select {
				case <-time.After(lat):
				case <-p.done:
					return
				}
			}
			if !p.wait(open) {
				return
			}
			if l.severed.Load() {
				p.end(l, toServer)
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				p.forget(l)
				return
			}
		}
		if err != nil {
			p.mu.Lock()
			open := p.open
			p.mu.Unlock()
			if !p.wait(open) || !toServer && l.severed.Load() {
				return // closed; or the severed server side, whose client stays open
			}
			p.forget(l)
			return
		}
	}
}

// wait waits until open is closed (the stall is over); false when the
// proxy closed first.
func (p *Proxy) wait(open chan struct{}) bool {
	select {
	case <-open:
		return true
	case <-p.done:
		return false
	}
}

// end handles bytes on a severed link: the client's are answered with a
// reset (its peer has no such connection any more); the server's cannot
// come (its side is closed).
func (p *Proxy) end(l *link, fromClient bool) {
	if !fromClient {
		return
	}
	if tc, ok := l.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST
	}
	p.forget(l)
}

// forget closes both sides of l and stops tracking it.
func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l.client.Close()
	l.server.Close()
	delete(p.links, l)
}

// SetLatency delays every reply by d from now on (0 removes the delay).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Drop closes every open connection; new ones are accepted as usual.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.client.Close()
		l.server.Close()
	}
}

// Stall stops forwarding bytes in both directions, keeping every
// connection open (a frozen server or a black-holed network): bytes and
// closes are held, nothing is dropped or reset. New connections are
// accepted (and their server dialled) and stall too.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already stalled
	}
}

// Resume lets bytes flow again after Stall, as a short partition heals
// (TCP retransmits what was lost): what was held is delivered, closes
// included.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked()
}

func (p *Proxy) resumeLocked() {
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Sever ends a stall as a long partition heals, after the server's side
// gave up on every connection: each connection open now loses its server
// side (closed; what was held is dropped), while its client side stays
// open and silent, as a client that was never told: nothing reaches it
// again, and the first bytes it sends get it reset. New connections are
// forwarded as usual.
func (p *Proxy) Sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.severed.Store(true)
		l.server.Close()
	}
	p.resumeLocked()
}

// Close stops the proxy, closes every connection and waits for its
// goroutines. It may be called more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return
	default:
	}
	close(p.done)
	for l := range p.links {
		l.client.Close()
		l.server.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}
