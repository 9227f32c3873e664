package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
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
	// Build the engine on the rules, as serve does, so that validate and
	// serve never disagree about a file.
	if err := buildEngine(ctx, snap); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid: %d rules, revision %s\n", path, len(snap.Rules()), snap.Revision())
	return 0
}

// buildEngine builds an engine under snap on a throwaway memory store.
func buildEngine(ctx context.Context, snap *rules.Snapshot) error {
	store, err := memorystore.New(memorystore.WithMaxKeys(1))
	if err != nil {
		return err
	}
	defer store.Close()
	_, err = engine.New(ctx, store, snapshotSource{snap}, engine.WithLogger(slog.New(slog.DiscardHandler)))
	return err
}

// snapshotSource is a rules.Source of one snapshot already loaded.
type snapshotSource struct{ s *rules.Snapshot }

func (s snapshotSource) Load(context.Context) (*rules.Snapshot, error) { return s.s, nil }

func (s snapshotSource) Watch(ctx context.Context, _ func(*rules.Snapshot) error, _ func(error)) error {
	<-ctx.Done()
	return nil
}

// errorLines splits a rules error into its lines, each without the
// package's "rules file " (or "rules: ") prefix: "file:line:field: message".
func errorLines(err error) []string {
	var out []string
	for line := range strings.SplitSeq(err.Error(), "\n") {
		line = strings.TrimPrefix(line, "rules file ")
		if line = strings.TrimPrefix(line, "rules: "); line != "" {
			out = append(out, line)
		}
	}
	return out
}
