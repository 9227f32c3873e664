package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy between a client and a Redis server
// that injects faults on demand: added latency on every reply, dropped
// connections (all closed at once) and stalls (bytes stop flowing while the
// connections stay open). It starts one goroutine per listener and two per
// connection, all ended by Close (registered as a test cleanup).
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener
	done   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	latency time.Duration
	open    chan struct{} // closed while bytes flow; a fresh open channel while stalled
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
		done: make(chan struct{}), conns: map[net.Conn]struct{}{}, open: make(chan struct{}),
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
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		go p.pump(server, client, false)
		go p.pump(client, server, true)
	}
}

// track registers a connection pair, or closes it if the proxy is closed.
func (p *Proxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		a.Close()
		b.Close()
		return false
	default:
	}
	p.conns[a], p.conns[b] = struct{}{}, struct{}{}
	return true
}

// pump copies src to dst, delaying replies (delay set) by the current
// latency and holding every chunk while the proxy is stalled. When either
// side ends, both are closed.
func (p *Proxy) pump(dst, src net.Conn, delay bool) {
	defer p.wg.Done()
	defer p.forget(dst, src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open, lat := p.open, p.latency
			p.mu.Unlock()
			if delay && lat > 0 {
				select {
				case <-time.After(lat):
				case <-p.done:
					return
				}
			}
			select {
			case <-open:
			case <-p.done:
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) forget(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
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
	for c := range p.conns {
		c.Close()
	}
}

// Stall stops forwarding bytes in both directions, keeping every
// connection open (a frozen server or a black-holed network). New
// connections are accepted and stall too.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already stalled
	}
}

// Resume lets bytes flow again after Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
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
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}
