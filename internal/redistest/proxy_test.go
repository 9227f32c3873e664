package redistest_test

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// echoServer accepts connections on loopback and echoes what each sends;
// every connection it sees end is reported on ended.
func echoServer(t *testing.T) (addr string, ended <-chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	ch := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(c, c)
				_ = c.Close()
				ch <- struct{}{}
			}()
		}
	}()
	return ln.Addr().String(), ch
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_, err := c.Write([]byte(msg))
	require.NoError(t, err)
	buf := make([]byte, len(msg))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, msg, string(buf))
}

// A stall holds bytes and closes alike (no FIN reaches the server while
// it lasts); Resume delivers what was held.
func TestProxyStallHoldsBytesAndCloses(t *testing.T) {
	addr, ended := echoServer(t)
	p := redistest.NewProxy(t, addr)
	c, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	roundTrip(t, c, "before")

	p.Stall()
	_, err = c.Write([]byte("held"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, err = c.Read(make([]byte, 4))
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "nothing comes back while stalled: %v", err)

	gone, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	require.NoError(t, gone.Close())
	select {
	case <-ended:
		t.Fatal("a close crossed the stall")
	case <-time.After(200 * time.Millisecond):
	}

	p.Resume()
	buf := make([]byte, 4)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "held", string(buf), "held bytes are delivered")
	select {
	case <-ended: // the held close, delivered
	case <-time.After(5 * time.Second):
		t.Fatal("the held close never reached the server")
	}
}

// Sever ends a stall with the server's sides gone: a client that sends
// nothing notices nothing, one that sends is reset; new connections work.
func TestProxySever(t *testing.T) {
	addr, ended := echoServer(t)
	p := redistest.NewProxy(t, addr)
	quiet, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	talker, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	roundTrip(t, quiet, "a")
	roundTrip(t, talker, "b")

	p.Stall()
	p.Sever()
	for range 2 {
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatal("the server sides were not closed")
		}
	}
	require.NoError(t, quiet.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, err = quiet.Read(make([]byte, 1))
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a quiet client sees no end: %v", err)

	_, err = talker.Write([]byte("x"))
	require.NoError(t, err)
	require.NoError(t, talker.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = talker.Read(make([]byte, 1))
	require.ErrorIs(t, err, syscall.ECONNRESET, "a client that sends is reset")

	fresh, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	roundTrip(t, fresh, "after")
}
