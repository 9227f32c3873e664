// Command ratelimitd is sluice's rate-limit service: the engine behind a
// native gRPC API (sluice.ratelimit.v1), Envoy's rate-limit protocol
// (envoy.service.ratelimit.v3) and an HTTP JSON API, on the memory store or
// on Redis (single node, Sentinel or Cluster) behind the guard.
//
// Usage:
//
//	ratelimitd serve [flags]          run the service
//	ratelimitd validate FILE          check a rules file: exit 0 when valid, 1 with file:line:field errors
//	ratelimitd check [flags]          ask a running ratelimitd (gRPC) and print the answer
//	ratelimitd rules import FILE --db DSN   load rules (a JSON array) into a rules database, all or none
//	ratelimitd rules export [FILE] --db DSN write a rules database's rules as JSON
//	ratelimitd token create NAME --scope read|write --db DSN   create an admin API token (its secret is printed once)
//	ratelimitd token list --db DSN | token revoke NAME --db DSN   (--db defaults to $RATELIMITD_DB)
//	ratelimitd version                print the version
//
// Every flag of serve is also an environment variable, RATELIMITD_ and the
// flag's name in upper snake case (--grpc-addr: RATELIMITD_GRPC_ADDR); a
// flag given on the command line wins over the environment. With no flag
// at all, serve answers on 127.0.0.1:8081 (gRPC) and 127.0.0.1:8080 (HTTP)
// with the memory store and the bundled example rules: nothing to install.
//
// See docs/service.md for the APIs, the rules format and the operations.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis writes its own lines (a failed dial, a pool error) to
	// stderr through a logger of its own, which would break
	// --log-format json; the store's failures are logged (slog) and
	// counted by the guard and the store probe instead.
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal (a drain), a second one kills at once.
	go func() { <-ctx.Done(); stop() }()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}

// quietRedis is go-redis's logger in ratelimitd: it drops go-redis's own
// lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// lookupEnv reads one environment variable (os.LookupEnv; tests pass a map).
type lookupEnv func(name string) (string, bool)

// version is the version printed by `ratelimitd version`.
const version = "ratelimitd (sluice) devel"

// run runs the subcommand of args and returns the process's exit code: 0
// success, 1 a failure or an invalid rules file, 2 a usage error. ctx ends
// on SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		return serveCmd(ctx, args[1:], stdout, stderr, env)
	case "validate":
		return validateCmd(ctx, args[1:], stdout, stderr)
	case "check":
		return checkCmd(ctx, args[1:], stdout, stderr, env)
	case "rules":
		return rulesCmd(ctx, args[1:], stdout, stderr, env)
	case "token":
		return tokenCmd(ctx, args[1:], stdout, stderr, env)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version)
		return 0
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "ratelimitd: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  ratelimitd serve [flags]      run the service (ratelimitd serve -h lists the flags)
  ratelimitd validate FILE      check a rules file (exit 0 valid, 1 with file:line:field errors)
  ratelimitd check [flags]      ask a running ratelimitd over gRPC (ratelimitd check -h)
  ratelimitd rules import FILE --db DSN   load rules (a JSON array) into a rules database, all or none
  ratelimitd rules export [FILE] --db DSN write a rules database's rules as JSON
  ratelimitd token create NAME --scope read|write --db DSN   create an admin API token (its secret is printed once)
  ratelimitd token list --db DSN | token revoke NAME --db DSN   (--db defaults to $RATELIMITD_DB)
  ratelimitd version            print the version

Every serve flag is also an environment variable: RATELIMITD_<FLAG>, e.g.
--grpc-addr is RATELIMITD_GRPC_ADDR; check's are RATELIMITD_CHECK_<FLAG>.
Flags win over the environment.
`)
}
