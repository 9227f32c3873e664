package daemon

import (
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
	}{{DefaultGCPercent, true}, {1, true}, {-1, true}, {0, false}, {-2, false}} {
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
