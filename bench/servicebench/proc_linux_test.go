package servicebench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses; utime 250, stime 17 ticks.
	line := "4242 (ratelimit (x) d) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 17 0 0 20 0 9 0 100 0 0\n"
	d, err := parseStat(line)
	require.NoError(t, err)
	require.Equal(t, 267*clockTick, d)

	_, err = parseStat("4242 ratelimitd S 1")
	require.ErrorContains(t, err, "no command name")
	_, err = parseStat("4242 (x) S 1 2 3")
	require.ErrorContains(t, err, "fields")
	_, err = parseStat("4242 (x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 u 17 0")
	require.ErrorContains(t, err, "not integers")
}

func TestProcessCPU(t *testing.T) {
	before, err := ProcessCPU(os.Getpid())
	require.NoError(t, err)
	// Spin until the time shows (a tick is 10 ms of CPU), bounded.
	after := before
	for end := time.Now().Add(5 * time.Second); after == before && time.Now().Before(end); {
		after, err = ProcessCPU(os.Getpid())
		require.NoError(t, err)
	}
	require.Greater(t, after, before, "spinning shows in /proc/self/stat")

	_, err = ProcessCPU(1 << 30)
	require.Error(t, err)
}

func TestCacheDir(t *testing.T) {
	t.Setenv(CacheEnv, "/some/where")
	d, err := CacheDir()
	require.NoError(t, err)
	require.Equal(t, "/some/where", d)

	t.Setenv(CacheEnv, "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	d, err = CacheDir()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(os.TempDir(), "sluice-bench"), d, "no home: the temporary directory")
}
