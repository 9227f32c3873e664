// Package lua embeds the Redis scripts of sluice: one per algorithm family,
// each a line-for-line port of the step function in core/algo, prefixed with
// a shared prelude (common.lua) that reads the clock and decodes the stored
// state.
package lua

import (
	_ "embed"

	"github.com/sluicehq/sluice/core"
)

var (
	//go:embed common.lua
	common string
	//go:embed bucket.lua
	bucket string
	//go:embed fixed_window.lua
	fixedWindow string
	//go:embed sliding_window_counter.lua
	slidingCounter string
	//go:embed sliding_window_log.lua
	slidingLog string
)

// Source returns the complete script that decides requests for a.
// TokenBucket, LeakyBucket and GCRA share one script (they are one meter).
func Source(a core.Algorithm) string {
	switch a {
	case core.FixedWindow:
		return common + fixedWindow
	case core.SlidingWindowCounter:
		return common + slidingCounter
	case core.SlidingWindowLog:
		return common + slidingLog
	case core.TokenBucket, core.LeakyBucket, core.GCRA:
		return common + bucket
	}
	return ""
}
