package schedlag_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/schedlag"
)

// Max never goes down, keeps its value after Stop (which may be called
// twice), and a probe stopped at once has measured nothing late by more
// than the time it ran.
func TestProbeMaxAfterStop(t *testing.T) {
	start := time.Now()
	p := schedlag.Start(t)
	time.Sleep(20 * time.Millisecond)
	first := p.Max()
	time.Sleep(20 * time.Millisecond)
	require.GreaterOrEqual(t, p.Max(), first)
	p.Stop()
	seen := p.Max()
	require.GreaterOrEqual(t, seen, time.Duration(0))
	require.Less(t, seen, time.Since(start), "a delay longer than the probe ran")
	time.Sleep(10 * time.Millisecond)
	require.Equal(t, seen, p.Max(), "a stopped probe measures nothing more")
	p.Stop()
}
