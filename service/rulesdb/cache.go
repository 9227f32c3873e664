package rulesdb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// cacheFormat names the layout of the cache file.
const cacheFormat = "sluice-rules-cache/1"

// cacheFile is the cache's JSON document.
type cacheFile struct {
	Format    string    `json:"format"`
	WrittenAt time.Time `json:"written_at"`
	state
}

// writeCache writes st to path atomically: a temporary file in the same
// directory (mode 0600), fsynced, renamed over path, and the directory
// fsynced, so a reader (or a crash) sees the old file or the new one.
func writeCache(path string, st *state, now time.Time) (err error) {
	b, err := json.Marshal(cacheFile{Format: cacheFormat, WrittenAt: now.UTC(), state: *st})
	if err != nil {
		return fmt.Errorf("rulesdb: cache %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("rulesdb: cache %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return fmt.Errorf("rulesdb: cache %s: %w", path, err)
	}
	if _, err = f.Write(b); err != nil {
		return fmt.Errorf("rulesdb: cache %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("rulesdb: cache %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("rulesdb: cache %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rulesdb: cache %s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// readCache reads the cache at path. A missing, unreadable or corrupt file
// is an error naming it.
func readCache(path string) (*state, time.Time, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, time.Time{}, fmt.Errorf("rulesdb: cache %s: none yet (it is written after the first good load): %w", path, err)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("rulesdb: cache %s: %w", path, err)
	}
	var c cacheFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, time.Time{}, fmt.Errorf("rulesdb: cache %s: corrupt: %w", path, err)
	}
	if c.Format != cacheFormat {
		return nil, time.Time{}, fmt.Errorf("rulesdb: cache %s: format: want %q, got %q", path, cacheFormat, c.Format)
	}
	for i, r := range c.Rules {
		if r == nil {
			return nil, time.Time{}, fmt.Errorf("rulesdb: cache %s: corrupt: rules[%d]: null", path, i)
		}
	}
	return &c.state, c.WrittenAt, nil
}
