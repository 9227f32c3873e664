// Package lua embeds the Redis scripts of sluice. Each algorithm of
// core/algo is ported line for line as a Lua function (bucket.lua,
// window.lua, log.lua) after a shared prelude (common.lua) that reads the
// clock and encodes state; Decide and Refund are the two scripts built from
// them.
package lua

import _ "embed"

var (
	//go:embed common.lua
	common string
	//go:embed bucket.lua
	bucket string
	//go:embed window.lua
	window string
	//go:embed log.lua
	log string
	//go:embed decide.lua
	decide string
	//go:embed refund.lua
	refund string
)

// Decide returns the script that decides the ops of one request on the keys
// of one identity, all or nothing (see decide.lua for its arguments).
func Decide() string { return common + bucket + window + log + decide }

// Refund returns the script that gives back units of earlier admissions.
func Refund() string { return common + bucket + window + log + refund }

// Algorithm codes used in the scripts' arguments.
const (
	CodeBucket  = "b"
	CodeFixed   = "f"
	CodeCounter = "c"
	CodeLog     = "l"
)
