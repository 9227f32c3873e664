package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// The prefixes of the flags' environment variables: serve's are
// RATELIMITD_<FLAG>, check's RATELIMITD_CHECK_<FLAG> (so that a server's
// RATELIMITD_GRPC_ADDR never becomes a client's --addr by accident).
const (
	servePrefix = "RATELIMITD_"
	checkPrefix = "RATELIMITD_CHECK_"
)

// envName is the environment variable of a flag: prefix and the flag's
// name in upper snake case (grpc-addr: RATELIMITD_GRPC_ADDR).
func envName(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args into fs after applying the environment: every flag
// not given on the command line takes its variable (prefix and its name)
// when set, so
// a flag wins over the environment, which wins over the default. A bad
// value names the flag or the variable it came from. It returns the
// positional arguments.
func parseFlags(fs *flag.FlagSet, args []string, prefix string, env lookupEnv) ([]string, error) {
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
		name := envName(prefix, f.Name)
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

// flagUsage writes the flags of fs with their environment variables
// (prefix and the flag's name).
func flagUsage(w io.Writer, fs *flag.FlagSet, prefix, head string) {
	fmt.Fprintln(w, head)
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(w, "  --%s (env %s, default %q)\n      %s\n", f.Name, envName(prefix, f.Name), f.DefValue, f.Usage)
	})
}
