package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/sluicehq/sluice/service/internal/daemon"
)

// serveCmd runs `ratelimitd serve`: 0 after a clean shutdown, 1 when the
// service failed to start or failed while serving, 2 on a usage error.
func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	fs, c, err := parseServe(args, env)
	if errors.Is(err, flag.ErrHelp) {
		flagUsage(stdout, fs, servePrefix, "usage: ratelimitd serve [flags]")
		return 0
	}
	if err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintf(stderr, "ratelimitd serve: %s\n", line)
		}
		fmt.Fprintln(stderr, "ratelimitd serve -h lists the flags")
		return 2
	}
	log := c.NewLogger(stderr)
	if err := serve(ctx, c, log); err != nil {
		log.Error("ratelimitd failed", "error", err)
		return 1
	}
	return 0
}

// parseServe reads serve's flags from args and the environment (a flag
// wins) into a validated Config; it also returns the flag set, for -h.
func parseServe(args []string, env lookupEnv) (*flag.FlagSet, daemon.Config, error) {
	var c daemon.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.RegisterFlags(fs)
	rest, err := parseFlags(fs, args, servePrefix, env)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q (flags only)", rest[0])
	}
	if err == nil {
		err = c.Validate()
	}
	return fs, c, err
}

// serve runs the service until ctx ends (the first SIGINT or SIGTERM) or it
// fails, then drains and stops it (daemon.Daemon.Close). It returns nil
// after a clean shutdown.
func serve(ctx context.Context, c daemon.Config, log *slog.Logger) error {
	d, err := daemon.New(c, log)
	if err != nil {
		return err
	}
	// A signal during the start does not cut it short: the service
	// starts, then drains at once.
	if err := d.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-d.Failed():
	}
	return d.Close(context.Background())
}
