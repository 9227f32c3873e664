package fiberlimit_test

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestWireHeaderNames reads the response off the connection as a client
// does: the rate-limit header names are written as fasthttp normalizes
// them ("X-Ratelimit-Limit"), and as sluice spells them
// ("X-RateLimit-Limit") under DisableHeaderNormalizing.
func TestWireHeaderNames(t *testing.T) {
	for _, normalize := range []bool{true, false} {
		t.Run(map[bool]string{true: "normalized", false: "as written"}[normalize], func(t *testing.T) {
			mem, _ := newStore(t)
			l := newLimiter(t, mem, core.Policy{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerMinute(1)})
			app := fiber.New(fiber.Config{DisableHeaderNormalizing: !normalize, DisableStartupMessage: true})
			app.Get("/", fiberlimit.New(l), ok)
			ln := fasthttputil.NewInmemoryListener()
			done := make(chan error, 1)
			go func() { done <- app.Listener(ln) }()
			t.Cleanup(func() {
				require.NoError(t, app.ShutdownWithTimeout(5*time.Second))
				require.NoError(t, <-done)
			})

			names := []string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-State", "Retry-After"}
			if !normalize {
				names = []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-State", "Retry-After"}
			}
			for i, want := range []struct {
				status int
				names  []string
			}{{http.StatusOK, names[:6]}, {http.StatusTooManyRequests, names}} {
				conn, err := ln.Dial()
				require.NoError(t, err)
				require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
				_, err = conn.Write([]byte("GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"))
				require.NoError(t, err)
				br := bufio.NewReader(conn)
				status, err := br.ReadString('\n')
				require.NoError(t, err)
				require.True(t, strings.HasPrefix(status, "HTTP/1.1 "+strconv.Itoa(want.status)+" "), "request %d: %q", i, status)
				var got []string
				for {
					line, err := br.ReadString('\n')
					require.NoError(t, err)
					if line == "\r\n" {
						break
					}
					name, _, ok := strings.Cut(line, ":")
					require.True(t, ok, line)
					if strings.Contains(strings.ToLower(name), "ratelimit") || strings.EqualFold(name, "Retry-After") {
						got = append(got, name)
					}
				}
				require.NoError(t, conn.Close())
				require.Equal(t, want.names, got, "request %d", i)
			}
		})
	}
}
