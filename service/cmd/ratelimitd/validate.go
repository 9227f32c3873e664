package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/service/rules"
)

// validateCmd runs `ratelimitd validate FILE`: it reads and validates the
// rules file (or directory of Envoy files) as serve would, and exits 0
// when it is valid (a one-line summary on stdout), 1 with one
// "file:line:field: message" per error on stderr.
func validateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, "usage: ratelimitd validate FILE")
		return 0
	}
	if err == nil && fs.NArg() != 1 {
		err = errors.New("want one rules file")
	}
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd validate: %v\nusage: ratelimitd validate FILE\n", err)
		return 2
	}
	path := fs.Arg(0)
	snap, err := rules.NewFile(path).Load(ctx)
	if err != nil {
		for _, line := range errorLines(err) {
			fmt.Fprintln(stderr, line)
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid: %d rules, revision %s\n", path, len(snap.Rules()), snap.Revision())
	return 0
}

// errorLines splits a rules error into its lines, each without the
// package's "rules: " prefix: "file:line:field: message".
func errorLines(err error) []string {
	var out []string
	for line := range strings.SplitSeq(err.Error(), "\n") {
		if line = strings.TrimPrefix(line, "rules: "); line != "" {
			out = append(out, line)
		}
	}
	return out
}
