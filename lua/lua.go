// Package lua embeds the Redis scripts of sluice. Each algorithm of
// core/algo is ported line for line as a Lua function (bucket.lua,
// window.lua, log.lua) after a shared prelude (common.lua) that reads the
// clock and encodes state; decide.lua and refund.lua define the entry
// points, functions of (KEYS, ARGV): decide (the ops of one request, all or
// nothing), decide1 (one op), decideMany (independent ops, each as decide1)
// and refund.
//
// The same sources are served in two forms: a Redis Functions library
// (Library, for FUNCTION LOAD and FCALL on Redis 7 and later, where the
// definitions are made once per load) and one script per entry point
// (Decide, Decide1, DecideMany and Refund, for EVAL and EVALSHA, where they
// are made on every call).
package lua

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
)

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

// definitions returns every definition, the two entry points included.
func definitions() string {
	return common + bucket + window + log + decide + refund
}

// Decide returns the script that decides the ops of one request on the keys
// of one identity, all or nothing (see decide.lua for its arguments).
func Decide() string { return definitions() + "\nreturn decide(KEYS, ARGV)\n" }

// Decide1 returns the script that decides one op, with shorter arguments
// and reply than Decide (see decide1 in decide.lua).
func Decide1() string { return definitions() + "\nreturn decide1(KEYS, ARGV)\n" }

// DecideMany returns the script that decides many independent ops, each as
// Decide1 would (see decideMany in decide.lua).
func DecideMany() string { return definitions() + "\nreturn decideMany(KEYS, ARGV)\n" }

// Refund returns the script that gives back units of earlier admissions
// (see refund.lua for its arguments).
func Refund() string { return definitions() + "\nreturn refund(KEYS, ARGV)\n" }

// Library is the Redis Functions form of the scripts: one library whose
// functions take the keys and arguments of Decide, Decide1, DecideMany and
// Refund and give the same replies. Its names carry a digest of its code, so that two versions
// of sluice sharing a server each find their own, and loading it where it
// already exists changes nothing.
type Library struct {
	// Name is the library's name, "sluice_" and 16 hex digits.
	Name string
	// Code is the source to pass to FUNCTION LOAD.
	Code string
	// Decide, Decide1, DecideMany and Refund are the names to FCALL.
	Decide, Decide1, DecideMany, Refund string
}

// NewLibrary returns the library.
func NewLibrary() Library {
	defs := definitions()
	sum := sha256.Sum256([]byte(defs))
	name := "sluice_" + hex.EncodeToString(sum[:8])
	l := Library{Name: name, Decide: name + "_decide", Decide1: name + "_decide1", DecideMany: name + "_decide_many", Refund: name + "_refund"}
	l.Code = "#!lua name=" + name + "\n" + defs +
		"\nredis.register_function('" + l.Decide + "', decide)\n" +
		"redis.register_function('" + l.Decide1 + "', decide1)\n" +
		"redis.register_function('" + l.DecideMany + "', decideMany)\n" +
		"redis.register_function('" + l.Refund + "', refund)\n"
	return l
}

// Algorithm codes used in the scripts' arguments.
const (
	CodeBucket  = "b"
	CodeFixed   = "f"
	CodeCounter = "c"
	CodeLog     = "l"
)
