package servicebench

import (
	"os"
	"path/filepath"
)

// CacheEnv overrides the directory the servers' binaries are built and
// installed into (default: the user's cache directory, sluice-bench).
const CacheEnv = "SLUICE_BENCH_CACHE"

// CacheDir returns $SLUICE_BENCH_CACHE, else sluice-bench in the user's
// cache directory ($XDG_CACHE_HOME or ~/.cache on Linux), else (no home
// directory, as in some CI environments) sluice-bench in the temporary
// directory.
func CacheDir() (string, error) {
	if d := os.Getenv(CacheEnv); d != "" {
		return d, nil
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sluice-bench"), nil
	}
	return filepath.Join(os.TempDir(), "sluice-bench"), nil
}

// GoCommand returns the go command to build and install with: $GO (as the
// Makefile passes it) or go on PATH.
func GoCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}
