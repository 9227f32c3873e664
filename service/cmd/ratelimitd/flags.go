package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// envName is the environment variable of a flag: RATELIMITD_ and the
// flag's name in upper snake case (grpc-addr: RATELIMITD_GRPC_ADDR).
func envName(flagName string) string {
	return "RATELIMITD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args into fs after applying the environment: every flag
// not given on the command line takes its RATELIMITD_ variable when set, so
// a flag wins over the environment, which wins over the default. A bad
// value names the flag or the variable it came from. It returns the
// positional arguments.
func parseFlags(fs *flag.FlagSet, args []string, env lookupEnv) ([]string, error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || env == nil {
			return
		}
		name := envName(f.Name)
		v, ok := env(name)
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("%s: invalid value %q: %w", name, v, e)
		}
	})
	if err != nil {
		return nil, err
	}
	return fs.Args(), nil
}

// flagUsage writes the flags of fs with their environment variables.
func flagUsage(w io.Writer, fs *flag.FlagSet, head string) {
	fmt.Fprintln(w, head)
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(w, "  --%s (env %s, default %q)\n      %s\n", f.Name, envName(f.Name), f.DefValue, f.Usage)
	})
}
