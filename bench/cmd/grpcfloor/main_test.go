package main

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/remotestore"
)

// ratelimitdDir is the package that builds ratelimitd's servers, from this
// directory.
const ratelimitdDir = "../../../service/internal/daemon"

// accounted are the grpc.ServerOption constructors ratelimitd's main
// package may use that the floor rightly leaves out, and why.
var accounted = map[string]string{
	"ChainUnaryInterceptor":  "ratelimitd's metrics (and --grpc-auth's token) interceptors: its own work, measured against the floor",
	"ChainStreamInterceptor": "--grpc-auth's token interceptor, off in the benchmark",
	"Creds":                  "TLS (--tls-cert), off in the benchmark",
	"KeepaliveParams":        "--max-conn-age, off in the benchmark",
}

// TestServerOptionsInStep keeps the floor's server options in step with
// ratelimitd's: every grpc.ServerOption constructor the service module
// calls (its non-test files, wherever ratelimitd may take an option from)
// is in remotestore, whose ServerOptions the floor calls, or in the floor
// itself, or in accounted; and ratelimitd still takes its transport options
// from remotestore.ServerOptions.
func TestServerOptionsInStep(t *testing.T) {
	ctors := serverOptionConstructors(t)
	require.Contains(t, ctors, "NumStreamWorkers", "the scan finds grpc's ServerOption constructors")
	_, shared := optionsUsed(t, ratelimitdDir, ctors)
	require.True(t, shared, "ratelimitd no longer calls remotestore.ServerOptions: give the floor (ServerOptions in this package) what it uses instead")
	floor, floorShared := optionsUsed(t, ".", ctors)
	require.True(t, floorShared, "the floor calls remotestore.ServerOptions")
	used := moduleOptions(t, serviceDir, ctors)
	require.Contains(t, used, "ChainUnaryInterceptor", "the scan finds ratelimitd's own options")
	require.Contains(t, used, "KeepaliveEnforcementPolicy", "the scan finds remotestore's")
	for name, dirs := range used {
		for _, dir := range dirs {
			if filepath.Base(dir) == "remotestore" {
				continue // the floor calls remotestore.ServerOptions
			}
			_, ok := accounted[name]
			require.True(t, ok || slices.Contains(floor, name), "%s uses grpc.%s, which the floor does not: add it to ServerOptions in bench/cmd/grpcfloor with ratelimitd's value (or move it into remotestore.ServerOptions, which both call), or to accounted here if the floor rightly leaves it out", dir, name)
		}
	}
}

// serviceDir is the service module, from this directory.
const serviceDir = "../../../service"

// moduleOptions returns the constructors of ctors that the non-test Go
// files under root refer to, with the directories that do.
func moduleOptions(t *testing.T, root string, ctors []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		used, _ := optionsUsed(t, path, ctors)
		for _, name := range used {
			out[name] = append(out[name], path)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// serverOptionConstructors returns the exported functions of the grpc
// package the service module builds with that return a grpc.ServerOption.
func serverOptionConstructors(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", "google.golang.org/grpc")
	cmd.Dir = serviceDir
	out, err := cmd.Output()
	require.NoError(t, err, "go list google.golang.org/grpc in the service module")
	files := parseDir(t, strings.TrimSpace(string(out)))
	var names []string
	for _, f := range files {
		if f.Name.Name != "grpc" {
			continue
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "ServerOption" {
				names = append(names, fn.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// optionsUsed returns the constructors of ctors that the main package in
// dir (its non-test files) refers to, and whether it calls
// remotestore.ServerOptions.
func optionsUsed(t *testing.T, dir string, ctors []string) (used []string, shared bool) {
	t.Helper()
	for _, f := range parseDir(t, dir) {
		grpcName, storeName := importName(f, "google.golang.org/grpc"), importName(f, "github.com/sluicehq/sluice/service/remotestore")
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			switch {
			case !ok:
			case x.Name == grpcName && slices.Contains(ctors, sel.Sel.Name) && !slices.Contains(used, sel.Sel.Name):
				used = append(used, sel.Sel.Name)
			case x.Name == storeName && sel.Sel.Name == "ServerOptions":
				shared = true
			}
			return true
		})
	}
	slices.Sort(used)
	return used, shared
}

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		files = append(files, f)
	}
	return files
}

// importName is the name file f refers to the package at path by, "" if
// it does not import it.
func importName(f *ast.File, path string) string {
	for _, im := range f.Imports {
		p, err := strconv.Unquote(im.Path.Value)
		if err != nil || p != path {
			continue
		}
		if im.Name != nil {
			return im.Name.Name
		}
		return p[strings.LastIndexByte(p, '/')+1:]
	}
	return ""
}

func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	setGCPercent(func(string) string { return "" })
	require.Equal(t, remotestore.DefaultGCPercent, debug.SetGCPercent(100), "the floor collects at ratelimitd's target")
	setGCPercent(func(k string) string { return map[string]string{"GOGC": "50"}[k] })
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC set: the floor leaves the runtime's own reading of it")
}
