package config_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

const good = `# limits for the API
client_ip:
  trusted_proxies: [10.0.0.0/8]
  ipv6_prefix: 56
policies:
  - name: per-ip
    key: ip
    limit: 100
    window_seconds: 60
  - name: per-key-writes
    key: header:X-API-Key
    hash: true
    algorithm: sliding_window_counter
    limit: 20
    window_seconds: 1
    match:
      methods: [POST, PUT]
      endpoint_pattern: ["/api/**"]
    refund: failed
  - name: per-user
    key: header:X-User+route
    algorithm: gcra
    limit: 10
    window_seconds: 1
    burst: 20
    tiers:
      premium: {limit: 100, window_seconds: 1, burst: 200}
    shadow: true
`

// goodBefore is good in the names the file had before window_seconds,
// limit and endpoint_pattern (and with YAML 1.1's yes for true), which
// are still read with the same meaning.
const goodBefore = `# limits for the API
client_ip:
  trusted_proxies: [10.0.0.0/8]
  ipv6_prefix: 56
policies:
  - name: per-ip
    key: ip
    rate: 100
    period: 1m
  - name: per-key-writes
    key: header:X-API-Key
    hash: yes
    algorithm: sliding_window_counter
    rate: 20
    period: 1s
    match:
      methods: [POST, PUT]
      routes: ["/api/**"]
    refund: failed
  - name: per-user
    key: header:X-User+route
    algorithm: gcra
    rate: 10
    period: 1s
    burst: 20
    tiers:
      premium: {rate: 100, period: 1s, burst: 200}
    shadow: yes
`

func TestLoadYAMLAndJSON(t *testing.T) {
	ps, err := config.Parse("limits.yaml", []byte(good))
	require.NoError(t, err)
	require.Len(t, ps, 3)
	require.Equal(t, core.PerMinute(100), ps[0].Limit)
	require.Equal(t, core.SlidingWindowCounter, ps[1].Limit.Algorithm)
	require.Equal(t, []string{"/api/**"}, ps[1].Match.Routes)
	require.Equal(t, core.RefundFailed, ps[1].Refund)
	require.Equal(t, int64(200), ps[2].Tiers["premium"].Burst)
	require.True(t, ps[2].Shadow)
	// The key functions work: the header key is hashed, not raw.
	id, err := ps[1].Key(&keyfunc.Static{Headers: map[string][]string{"X-Api-Key": {"secret"}}})
	require.NoError(t, err)
	require.NotContains(t, id, "secret")
	js := `{"policies": [{"name": "a", "key": "ip", "limit": 5, "window_seconds": 10, "algorithm": "fixed_window"}]}`
	ps, err = config.Parse("limits.json", []byte(js))
	require.NoError(t, err)
	require.Equal(t, core.Per(5, 10*time.Second).WithAlgorithm(core.FixedWindow), ps[0].Limit)
}

// A policy's lease_seconds is its Lease, read exactly (to the
// microsecond), as window_seconds is.
func TestLeaseSeconds(t *testing.T) {
	ps, err := config.Parse("lease.yaml", []byte("policies:\n  - {name: global, key: \"const:all\", limit: 500000, window_seconds: 1, algorithm: fixed_window, lease_seconds: 0.1}\n  - {name: per-ip, key: ip, limit: 5, window_seconds: 1}\n"))
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, ps[0].Lease)
	require.Zero(t, ps[1].Lease)
}

func TestErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    algorithm: magic\n", `bad.yaml:6: policies[0].algorithm: unknown algorithm "magic" (token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, gcra)`},
		{"policies:\n  - name: a\n    key: ip\n    limit: -5\n    window_seconds: 1\n", `bad.yaml:4: policies[0].limit: must be a whole number >= 1, got "-5"`},
		{"policies:\n  - {name: a, key: ip, limit: 5, window_seconds: 1}\n  - {name: a, key: ip, limit: 6, window_seconds: 1}\n", `bad.yaml:3: policies[1].name: duplicate policy name "a" (first at line 2)`},
		{"policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    match:\n      endpoint_pattern: [/ok, \"/a/**/b\"]\n", `bad.yaml:7: policies[0].match.endpoint_pattern[1]: pattern "/a/**/b": ** must be the last segment`},
		{"policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    tiers:\n      gold: {burst: 5}\n", `bad.yaml:7: policies[0].tiers.gold.limit: required`},
		{"policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: soon\n", `bad.yaml:5: policies[0].window_seconds: must be a positive number of seconds`},
		{"policies:\n  - name: a\n    key: cookie:x\n    limit: 5\n    window_seconds: 1\n", `bad.yaml:3: policies[0].key: "cookie:x" is not a key`},
		{"policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    colour: red\n", `bad.yaml:6: policies[0].colour: unknown field`},
		{"policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    algorithm: fixed_window\n    burst: 9\n", `bad.yaml:7: policies[0].burst: fixed_window has no burst: leave it 0, got 9`},
		{"policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    algorithm: sliding_window_log\n    lease_seconds: 0.1\n", `bad.yaml:7: policies[0].lease_seconds: sliding_window_log cannot be leased`},
		{"policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    tiers:\n      gold: {limit: 9, window_seconds: 1, algorithm: sliding_window_log}\n    lease_seconds: 0.1\n", `bad.yaml:8: policies[0].lease_seconds: sliding_window_log cannot be leased`},
		{"policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    lease_seconds: -1\n", `bad.yaml:6: policies[0].lease_seconds: must be a positive number of seconds`},
		{"policies: []\n", `bad.yaml:1: policies: at least one policy is required`},
		{"policies: [\n", `config: bad.yaml:1: not valid YAML: `},
		{"", `config: bad.yaml: empty file`},
	}
	for _, c := range cases {
		_, err := config.Parse("bad.yaml", []byte(c.doc))
		require.ErrorContains(t, err, c.want, c.doc)
	}
}

// TestErrorsNameTheFieldAsWritten: a file in the old names has its errors
// under those names, so that the message points at what the file says.
func TestErrorsNameTheFieldAsWritten(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"policies:\n  - name: a\n    key: ip\n    rate: -5\n    period: 1s\n", `bad.yaml:4: policies[0].rate: must be a whole number >= 1, got "-5"`},
		{"policies:\n  - name: a\n    key: ip\n    rate: 5\n    period: 1s\n    match:\n      routes: [/ok, \"/a/**/b\"]\n", `bad.yaml:7: policies[0].match.routes[1]: pattern "/a/**/b": ** must be the last segment`},
		{"policies:\n  - name: a\n    key: ip\n    rate: 5\n    period: soon\n", `bad.yaml:5: policies[0].period: must be a positive duration`},
		{"policies:\n  - name: a\n    key: ip\n    rate: 5\n    period: 1s\n    tiers:\n      gold: {rate: 0, period: 1s}\n", `bad.yaml:7: policies[0].tiers.gold.rate: must be a whole number >= 1, got "0"`},
		{"policies:\n  - name: a\n    key: ip\n    algorithm: sliding_window_log\n    rate: 70000\n    period: 1s\n", `bad.yaml:5: policies[0].rate: sliding_window_log keeps one entry per event`},
		{"policies:\n  - name: a\n    key: ip\n    rate: 5\n    period: 1s\n    shadow: maybe\n", `bad.yaml:6: policies[0].shadow: must be true or false, got "maybe"`},
	}
	for _, c := range cases {
		_, err := config.Parse("bad.yaml", []byte(c.doc))
		require.ErrorContains(t, err, c.want, c.doc)
	}
}

func TestWatchReloadsWithoutDroppingRequests(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	write := func(doc string) {
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(doc), 0o600))
		require.NoError(t, os.Rename(tmp, path)) // atomic, as editors and deploy tools do
	}
	write("policies:\n  - {name: api, key: 'const:all', limit: 1000000, window_seconds: 1}\n")
	s, err := memorystore.New()
	require.NoError(t, err)
	defer s.Close()
	l, err := core.NewLimiter(s, []core.Policy{{Name: "bootstrap", Key: keyfunc.Const("all"), Limit: core.PerSecond(1)}})
	require.NoError(t, err)
	reloads := make(chan error, 10)
	w, err := config.Watch(path, l, config.Every(10*time.Millisecond), config.OnReload(func(err error) { reloads <- err }))
	require.NoError(t, err)
	defer w.Close()
	require.Equal(t, "api", l.Policies()[0].Name)
	// Traffic runs while the file changes: no request fails.
	var failed, done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := l.Check(context.Background(), &keyfunc.Static{}); err != nil {
					failed.Add(1)
				}
				done.Add(1)
			}
		}()
	}
	write("policies:\n  - {name: api-v2, key: 'const:all', limit: 2000000, window_seconds: 1}\n")
	require.NoError(t, <-reloads)
	require.Equal(t, "api-v2", l.Policies()[0].Name)
	// An invalid file: reported, and the last good policies stay.
	write("policies:\n  - {name: api-v3, key: 'const:all', limit: 0, window_seconds: 1}\n")
	err = <-reloads
	require.ErrorContains(t, err, "limits.yaml:2: policies[0].limit")
	require.Equal(t, "api-v2", l.Policies()[0].Name)
	close(stop)
	wg.Wait()
	require.Zero(t, failed.Load())
	require.Greater(t, done.Load(), int64(100))
	// A bad file at start is an error, and nothing changes.
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("policies: nope"), 0o600))
	_, err = config.Watch(bad, l)
	require.Error(t, err)
	require.True(t, strings.HasPrefix(l.Policies()[0].Name, "api-v2"))
}
