package deploy

import (
	"bufio"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const unitName = "ratelimitd.service"

// unitValues returns the values of key in the [Service] section of a unit.
func unitValues(t *testing.T, unit, key string) []string {
	t.Helper()
	var out []string
	section := ""
	sc := bufio.NewScanner(strings.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			if v, ok := strings.CutPrefix(line, key+"="); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// unitRoot lays out a root for systemd-analyze verify --root: the
// distribution's units (what the unit's dependencies name), the unit
// under etc/systemd/system, and the ratelimitd binary where ExecStart
// looks for it.
func unitRoot(t *testing.T, unit string) string {
	t.Helper()
	root := t.TempDir()
	sys, err := filepath.EvalSymlinks("/lib/systemd/system")
	require.NoError(t, err, "the distribution's units")
	copyTree(t, sys, filepath.Join(root, "usr", "lib", "systemd", "system"))
	etc := filepath.Join(root, "etc", "systemd", "system")
	require.NoError(t, os.MkdirAll(etc, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(etc, unitName), []byte(unit), 0o644))
	exec := unitValues(t, unit, "ExecStart")
	require.Len(t, exec, 1)
	bin := filepath.Join(root, strings.Fields(exec[0])[0])
	require.NoError(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	copyFile(t, ratelimitd(t), bin, 0o755)
	return root
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		}
		copyFile(t, p, dst, 0o644)
		return nil
	}))
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
}

// verify runs systemd-analyze verify on unit (in a root of its own) and
// returns what it said; a clean unit makes it say nothing.
func verify(t *testing.T, analyze, unit string) (string, int) {
	t.Helper()
	return run(t, ".", analyze, "verify", "--root="+unitRoot(t, unit), unitName)
}

// TestSystemdUnitVerifies: systemd-analyze verify finds nothing to say
// about deploy/systemd/ratelimitd.service (a warning fails the test, not
// only an error), and it does speak up about errors planted in copies.
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	analyze := tool(t, "systemd-analyze")
	data, err := os.ReadFile(filepath.Join("systemd", unitName))
	require.NoError(t, err)
	unit := string(data)
	out, code := verify(t, analyze, unit)
	require.Equal(t, 0, code, out)
	require.Empty(t, strings.TrimSpace(out), "systemd-analyze verify warns")

	for name, c := range map[string][2]string{
		"misspelled key": {"TimeoutStopSec=", "TimeoutStopSecs="},
		"bad value":      {"Type=exec", "Type=exce"},
		"bad section":    {"[Install]", "[Instal]"},
		"missing binary": {"ExecStart=/usr/local/bin/ratelimitd ", "ExecStart=/usr/local/bin/ratelimitd-missing "},
		"bad syscall":    {"SystemCallFilter=~@privileged", "SystemCallFilter=~@privilegd"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := strings.Replace(unit, c[0], c[1], 1)
			require.NotEqual(t, unit, bad, "the planted error must change the unit")
			if name == "missing binary" {
				// unitRoot puts the binary where ExecStart says: put it
				// at the real path instead.
				root := unitRoot(t, unit)
				require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "systemd", "system", unitName), []byte(bad), 0o644))
				out, _ := run(t, ".", analyze, "verify", "--root="+root, unitName)
				require.NotEmpty(t, strings.TrimSpace(out))
				return
			}
			out, _ := verify(t, analyze, bad)
			require.NotEmpty(t, strings.TrimSpace(out))
		})
	}
}

// TestSystemdUnitServesAndStops: the unit's ExecStart runs (its flags are
// ratelimitd's; only the database path and the addresses are the test's),
// and a SIGTERM, which systemd sends on stop, ends it with exit 0 after
// the drain, within TimeoutStopSec.
func TestSystemdUnitServesAndStops(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("systemd", unitName))
	require.NoError(t, err)
	unit := string(data)
	require.Equal(t, []string{"SIGTERM"}, unitValues(t, unit, "KillSignal"))
	stopTimeout := unitValues(t, unit, "TimeoutStopSec")
	require.Len(t, stopTimeout, 1)
	stop, err := time.ParseDuration(stopTimeout[0])
	require.NoError(t, err)
	args := strings.Fields(unitValues(t, unit, "ExecStart")[0])[1:]
	drain, shutdown := duration(t, args, "--drain-delay"), duration(t, args, "--shutdown-timeout")
	require.GreaterOrEqual(t, stop, drain+shutdown+2*time.Second, "systemd's SIGKILL comes after the drain and the shutdown")

	db, ok := flagValue(args, "--db")
	require.True(t, ok)
	require.True(t, strings.HasPrefix(db, "file:/var/lib/ratelimitd/"), "the database in StateDirectory: %s", db)
	require.Equal(t, []string{"ratelimitd"}, unitValues(t, unit, "StateDirectory"))
	args = setFlags(t, args, map[string]string{
		"--db":        "file:" + filepath.Join(t.TempDir(), "rules.db"),
		"--grpc-addr": "127.0.0.1:0", "--http-addr": "127.0.0.1:0",
	})
	p := serve(t, ratelimitd(t), nil, args...)
	code, _ := get(t, p.url("/readyz"))
	require.Equal(t, 200, code)
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(stop):
		t.Fatalf("still running %s after SIGTERM: systemd would kill it", stop)
	}
	require.Equal(t, 0, p.exit, p.logs.String())
	require.GreaterOrEqual(t, time.Since(start), drain)
}
