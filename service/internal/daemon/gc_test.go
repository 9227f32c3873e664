package daemon

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestApplyGCPercent: --gc-percent sets the collector's target, unless
// GOGC is set in the environment, whose target the runtime applied and
// which then stands (an empty GOGC is Go's default: the flag applies).
func TestApplyGCPercent(t *testing.T) {
	was := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(was) })
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	got, from := applyGCPercent(250, getenv)
	require.Equal(t, 250, got)
	require.Equal(t, "--gc-percent", from)
	require.Equal(t, 250, gcPercent(), "the runtime's target")

	env["GOGC"] = ""
	got, _ = applyGCPercent(300, getenv)
	require.Equal(t, 300, got)
	require.Equal(t, 300, gcPercent())

	debug.SetGCPercent(70) // as the runtime applies GOGC=70 at start
	env["GOGC"] = "70"
	got, from = applyGCPercent(400, getenv)
	require.Equal(t, 70, got, "GOGC wins over the flag")
	require.Equal(t, "GOGC", from)
	require.Equal(t, 70, gcPercent(), "the runtime's target is left alone")

	delete(env, "GOGC")
	got, _ = applyGCPercent(-1, getenv)
	require.Equal(t, -1, got)
	require.Equal(t, -1, gcPercent(), "off")
}

// TestGCPercentFlag: --gc-percent defaults to DefaultGCPercent, and takes
// -1 (off) or a positive percent.
func TestGCPercentFlag(t *testing.T) {
	require.Equal(t, DefaultGCPercent, Defaults().GCPercent)
	for _, tc := range []struct {
		percent int
		ok      bool
	}{{DefaultGCPercent, true}, {1, true}, {0, false}, {-2, false}} {
		c := Defaults()
		c.GCPercent = tc.percent
		errs := c.lifecycleErrors()
		if tc.ok {
			require.Empty(t, errs, "%d", tc.percent)
		} else {
			require.Len(t, errs, 1, "%d", tc.percent)
			require.ErrorContains(t, errs[0], "--gc-percent")
		}
	}
}

// TestGCOffNeedsAMemoryLimit: --gc-percent -1 is refused unless a memory
// limit bounds the heap, or GOGC is set (then the flag is not applied).
func TestGCOffNeedsAMemoryLimit(t *testing.T) {
	const noLimit = math.MaxInt64
	err := gcPercentError(-1, false, noLimit)
	require.ErrorContains(t, err, "--gc-percent")
	require.ErrorContains(t, err, "GOMEMLIMIT")
	require.NoError(t, gcPercentError(-1, false, 2<<30))
	require.NoError(t, gcPercentError(-1, true, noLimit))
	require.Error(t, gcPercentError(0, true, 2<<30), "the range is checked whatever is set")

	was := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(was) })
	c := Defaults()
	c.GCPercent = -1
	debug.SetMemoryLimit(1 << 30)
	require.Empty(t, c.lifecycleErrors(), "a limit set in the process")
	debug.SetMemoryLimit(noLimit)
	t.Setenv("GOGC", "")
	require.Len(t, c.lifecycleErrors(), 1, "no limit, GOGC unset")
	t.Setenv("GOGC", "off")
	require.Empty(t, c.lifecycleErrors(), "GOGC set: the flag is not applied")
}
