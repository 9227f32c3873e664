package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

// Two ratelimitd on one Redis decide a rule with a lease_seconds (one
// identity for everyone, 1000 an hour) from sixteen callers over HTTP, far
// over its limit: together they admit the limit and no more, and Redis
// serves a small share of the checks (the lease layer under the engine
// decides the rest in memory).
func TestLeasedRuleOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(file, []byte("rules:\n  - {name: global, dimension: all, algorithm: fixed_window, limit: 1000, window_seconds: 3600, lease_seconds: 0.2}\n"), 0o644))
	var daemons []*ratelimitdtest.Daemon
	for range 2 {
		c, err := ratelimitdtest.Config("--rules", file, "--redis", srv.Addr, "--failure-mode", "closed", "--store-timeout", "2s")
		require.NoError(t, err)
		daemons = append(daemons, ratelimitdtest.StartDaemon(t, c))
	}
	hour := time.Now().Truncate(time.Hour)
	var admitted, checks atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			url := daemons[i%2].URL(httpapi.Path)
			for n := 0; n < 400; n++ {
				ok, err := check(client, url)
				if err != nil {
					t.Error(err)
					return
				}
				checks.Add(1)
				if ok {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	calls := scriptCalls(t, srv)
	t.Logf("%d checks, %d admitted, %d Redis script calls", checks.Load(), admitted.Load(), calls)
	if time.Now().Truncate(time.Hour).Equal(hour) { // one window
		require.LessOrEqual(t, admitted.Load(), int64(1000), "over the limit")
		require.GreaterOrEqual(t, admitted.Load(), int64(900), "the limit, less what two blocks may park")
	}
	require.Less(t, calls, checks.Load()/5, "decided in memory")
}

// check makes one check of the global rule's identity and reports whether
// it was admitted.
func check(client *http.Client, url string) (bool, error) {
	body, _ := json.Marshal(httpapi.Request{KeyType: "all", KeyValue: "everyone"})
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var r httpapi.Response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return false, err
	}
	return r.Allowed, nil
}

// scriptCalls is the number of script calls (FCALL, EVALSHA, EVAL) srv has
// served.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	info, err := srv.Client(t).Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	total := int64(0)
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "cmdstat_fcall" && k != "cmdstat_evalsha" && k != "cmdstat_eval") {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			if name, val, _ := strings.Cut(kv, "="); name == "calls" {
				n, _ := strconv.ParseInt(val, 10, 64)
				total += n
			}
		}
	}
	return total
}
