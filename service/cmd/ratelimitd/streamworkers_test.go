package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/service/internal/daemon"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// TestServeStreamWorkers: the gRPC calls are served by
// --grpc-stream-workers long-lived goroutines (gRPC's serverWorker),
// whose stacks are reused from call to call, and by a goroutine per call
// with --grpc-stream-workers 0. The process is asked after 400 calls from
// 8 callers, through its pprof goroutine dump.
func TestServeStreamWorkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, daemon.DefaultStreamWorkers},
		{[]string{"--grpc-stream-workers", "6"}, 6},
		{[]string{"--grpc-stream-workers", "0"}, 0},
	} {
		p := ratelimitdtest.Start(t, bin(t), []string{asMain}, append([]string{"--pprof-addr", "127.0.0.1:0"}, tc.args...)...)
		client := ratelimitv1.NewRateLimitServiceClient(p.Conn(t))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() {
				for range 50 {
					_, err := client.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "ip", Identifier: "192.0.2." + strconv.Itoa(c), Cost: proto.Int64(1)})
					if err != nil {
						t.Errorf("check: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		cancel()
		require.Equal(t, tc.want, streamWorkers(t, pprofAddr(t, p)), "%v", tc.args)
	}
}

// pprofAddr is the address p logged its pprof server on.
func pprofAddr(t *testing.T, p instance) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(p.Logs()))
	for sc.Scan() {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "pprof serving" {
			return rec.Addr
		}
	}
	t.Fatalf("no pprof address in the logs:\n%s", p.Logs())
	return ""
}

// streamWorkers counts the goroutines in gRPC's serverWorker loop of the
// process serving pprof on addr.
func streamWorkers(t *testing.T, addr string) int {
	t.Helper()
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})
	resp, err := c.Get("http://" + addr + "/debug/pprof/goroutine?debug=2")
	require.NoError(t, err)
	defer resp.Body.Close()
	dump, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return strings.Count(string(dump), "google.golang.org/grpc.(*Server).serverWorker(")
}
