package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/daemon"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

// TestServeGCPercent: the running process's garbage collector target (the
// Go collector's go_gc_gogc_percent on /metrics) is --gc-percent's default,
// the flag's value, RATELIMITD_GC_PERCENT's, or GOGC's when GOGC is set,
// whatever the flag says.
func TestServeGCPercent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		want float64
	}{
		{[]string{"GOGC="}, nil, daemon.DefaultGCPercent},
		{[]string{"GOGC="}, []string{"--gc-percent", "150"}, 150},
		{[]string{"GOGC=", "RATELIMITD_GC_PERCENT=250"}, nil, 250},
		{[]string{"GOGC=50"}, []string{"--gc-percent", "150"}, 50},
	} {
		p := ratelimitdtest.Start(t, bin(t), append([]string{asMain}, tc.env...), tc.args...)
		require.Equal(t, tc.want, metric(t, p, "go_gc_gogc_percent"), "%v %v", tc.env, tc.args)
	}
}
