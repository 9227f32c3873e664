package exact_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/exact"
)

func TestGCD(t *testing.T) {
	for _, c := range [][3]int64{{12, 18, 6}, {18, 12, 6}, {7, 13, 1}, {5, 5, 5}, {1_000_000, 1000, 1000}, {exact.Max, 1 << 20, 1 << 20}} {
		require.Equal(t, c[2], exact.GCD(c[0], c[1]), "%d %d", c[0], c[1])
	}
	require.Equal(t, int64(9007199254740992), exact.Max)
}
