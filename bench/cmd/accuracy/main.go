// Command accuracy replays seeded traffic traces against sluice's six
// algorithms (the in-memory store on a simulated clock) and an exact sliding
// log, and reports how far each strays from the exact limit: the most
// requests admitted within any true sliding window ÷ Rate, and the share of
// requests wrongly allowed or denied. See package
// github.com/sluicehq/sluice/bench/accuracy and docs/algorithms.md.
//
// Usage (from the bench directory):
//
//	go run ./cmd/accuracy [-scale quick|full] [-seed 1] [-rate 100] [-period 1m] [-out ../docs]
//
// The Markdown tables go to stdout. With -out DIR it also writes
// DIR/algorithms-accuracy.svg and replaces the generated section of
// DIR/algorithms.md. docs/algorithms.md is regenerated with:
//
//	go run ./cmd/accuracy -scale full -out ../docs
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/bench/accuracy"
)

func main() {
	fs := flag.NewFlagSet("accuracy", flag.ExitOnError)
	scaleName := fs.String("scale", "quick", "size of the traces: quick (about a second) or full (the documentation's figures)")
	seed := fs.Uint64("seed", 1, "seed of the traces")
	rate := fs.Int64("rate", 100, "Rate of the limit (events per period)")
	period := fs.Duration("period", time.Minute, "Period of the limit")
	out := fs.String("out", "", "directory to write algorithms-accuracy.svg to and whose algorithms.md has its generated section replaced")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "replays run at once (the results do not depend on it)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/accuracy [flags]\n\nReplays traffic traces against the six algorithms and an exact sliding log.\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	scale, err := accuracy.ParseScale(*scaleName)
	if err != nil {
		fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	rep, err := accuracy.Run(ctx, accuracy.WithScale(scale), accuracy.WithSeed(*seed),
		accuracy.WithLimit(*rate, *period), accuracy.WithParallel(*parallel))
	if err != nil {
		fatal(err)
	}
	var requests int
	for _, t := range rep.Traces {
		requests += t.Requests
	}
	fmt.Fprintf(os.Stderr, "accuracy: %d traces, %d requests, %d replays in %s\n",
		len(rep.Traces), requests, len(rep.Rows), time.Since(start).Round(time.Millisecond))
	md := rep.Markdown()
	fmt.Print(md)
	if *out == "" {
		return
	}
	svg := filepath.Join(*out, "algorithms-accuracy.svg")
	if err := os.WriteFile(svg, rep.SVG(), 0o644); err != nil {
		fatal(fmt.Errorf("accuracy: %w", err))
	}
	doc := filepath.Join(*out, "algorithms.md")
	text, err := os.ReadFile(doc)
	if err != nil {
		fatal(fmt.Errorf("accuracy: %w", err))
	}
	updated, err := accuracy.ReplaceGenerated(string(text), md)
	if err != nil {
		fatal(fmt.Errorf("%s: %w", doc, err))
	}
	if err := os.WriteFile(doc, []byte(updated), 0o644); err != nil {
		fatal(fmt.Errorf("accuracy: %w", err))
	}
	fmt.Fprintf(os.Stderr, "accuracy: wrote %s and the generated section of %s\n", svg, doc)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
