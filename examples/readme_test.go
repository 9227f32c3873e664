package examples_test

// This file checks that every Go snippet of the documentation compiles: the
// ```go blocks of README.md and docs/*.md are extracted, each becomes a
// package of its own inside this module (through `go build -overlay`, so
// nothing is written to the tree), and one `go build` compiles them all
// against the working tree of sluice and the framework versions of this
// module's go.mod. A whole program that says what it prints (a "// Output:"
// comment, as in an Example function) is also run, and must print that.
//
// How a block becomes a package:
//
//   - A block whose first line of code (after comments and blank lines)
//     starts with "package" is a whole file and is compiled as it is.
//   - Any other block is a fragment. If it parses as top-level declarations
//     (types, funcs, vars) it is placed at the top of a file; otherwise it is
//     the body of a function returning error (so it may `return err`). Every
//     variable the fragment declares at its top level is marked used.
//     Imports are added for the package names it refers to (see
//     knownImports), and these package-level variables are in scope, so a
//     fragment can use them without declaring them: ctx, store, redisStore,
//     limiter, policies, clientIP, client, mux and handler (see
//     fragmentContext).
//   - The line before the block (blank lines aside) may hold a marker:
//     <!-- snippet: skip REASON --> leaves the block out (pseudo-code, or a
//     third-party library this module does not require), and
//     <!-- snippet: with DECLARATIONS --> adds Go declarations for the
//     fragment, for example <!-- snippet: with var r *gin.Engine -->.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	// Documentation snippets use config; importing it here keeps it in
	// this module's go.mod.
	_ "github.com/sluicehq/sluice/config"
)

// knownImports maps the package names a fragment may use to their import
// paths.
var knownImports = map[string]string{
	"context":  "context",
	"errors":   "errors",
	"fmt":      "fmt",
	"io":       "io",
	"json":     "encoding/json",
	"log":      "log",
	"math":     "math",
	"net":      "net",
	"netip":    "net/netip",
	"http":     "net/http",
	"httptest": "net/http/httptest",
	"os":       "os",
	"signal":   "os/signal",
	"slog":     "log/slog",
	"strconv":  "strconv",
	"strings":  "strings",
	"sync":     "sync",
	"syscall":  "syscall",
	"time":     "time",

	"core":            "github.com/sluicehq/sluice/core",
	"algo":            "github.com/sluicehq/sluice/core/algo",
	"guard":           "github.com/sluicehq/sluice/core/guard",
	"lease":           "github.com/sluicehq/sluice/core/lease",
	"memorystore":     "github.com/sluicehq/sluice/core/memorystore",
	"redisstore":      "github.com/sluicehq/sluice/core/redisstore",
	"limitertest":     "github.com/sluicehq/sluice/core/limitertest",
	"keyfunc":         "github.com/sluicehq/sluice/keyfunc",
	"lua":             "github.com/sluicehq/sluice/lua",
	"httplimit":       "github.com/sluicehq/sluice/adapters/httplimit",
	"ginlimit":        "github.com/sluicehq/sluice/adapters/ginlimit",
	"echolimit":       "github.com/sluicehq/sluice/adapters/echolimit",
	"fiberlimit":      "github.com/sluicehq/sluice/adapters/fiberlimit",
	"grpclimit":       "github.com/sluicehq/sluice/adapters/grpclimit",
	"config":          "github.com/sluicehq/sluice/config",
	"promlimit":       "github.com/sluicehq/sluice/adapters/promlimit",
	"otellimit":       "github.com/sluicehq/sluice/adapters/otellimit",
	"ratelimitfields": "github.com/sluicehq/sluice/ratelimitfields",

	"gin":      "github.com/gin-gonic/gin",
	"echo":     "github.com/labstack/echo/v4",
	"fiber":    "github.com/gofiber/fiber/v2",
	"redis":    "github.com/redis/go-redis/v9",
	"grpc":     "google.golang.org/grpc",
	"codes":    "google.golang.org/grpc/codes",
	"status":   "google.golang.org/grpc/status",
	"metadata": "google.golang.org/grpc/metadata",
	"insecure": "google.golang.org/grpc/credentials/insecure",

	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":       "go.opentelemetry.io/otel",
}

// fragmentContext is in scope of every fragment: the names the
// documentation uses for the things a program has built before the snippet.
const fragmentContext = `var (
	ctx        context.Context
	store      core.Store
	redisStore *redisstore.Store
	limiter    *core.Limiter
	policies   []core.Policy
	clientIP   keyfunc.Func
	client     redis.UniversalClient
	mux        *http.ServeMux
	handler    http.Handler
)
`

// snippet is one ```go block of a Markdown file.
type snippet struct {
	file string // as given to extractSnippets
	line int    // 1-based line of the opening fence
	code string // the block's content, its fence's indentation removed
	skip string // the reason of a skip marker, or ""
	with string // the declarations of a with marker, or ""
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

var (
	openFence = regexp.MustCompile("^([ \t]*)(`{3,}|~{3,})[ \t]*([^ \t`]*)")
	marker    = regexp.MustCompile(`^<!--\s*snippet:\s*(skip|with)\b(.*?)-->\s*$`)
)

// extractSnippets returns the ```go blocks of a Markdown text. Fences may be
// indented (inside list items) and use backticks or tildes.
func extractSnippets(name, text string) ([]snippet, error) {
	lines := strings.Split(text, "\n")
	var out []snippet
	for i := 0; i < len(lines); i++ {
		m := openFence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, fence, lang := m[1], m[2], m[3]
		start := i
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			t := strings.TrimSpace(lines[i])
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				closed = true
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if !closed {
			return nil, fmt.Errorf("%s:%d: code block never closed", name, start+1)
		}
		if lang != "go" {
			continue
		}
		s := snippet{file: name, line: start + 1, code: strings.Join(body, "\n") + "\n"}
		for j := start - 1; j >= 0; j-- {
			t := strings.TrimSpace(lines[j])
			if t == "" {
				continue
			}
			if mm := marker.FindStringSubmatch(t); mm != nil {
				arg := strings.TrimSpace(mm[2])
				if mm[1] == "skip" {
					s.skip = arg
					if s.skip == "" {
						s.skip = "marked skip"
					}
				} else {
					s.with = arg
				}
			}
			break
		}
		out = append(out, s)
	}
	return out, nil
}

// isWholeFile reports whether code's first line of code is a package clause.
func isWholeFile(code string) bool {
	inBlock := false
	for _, l := range strings.Split(code, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case inBlock:
			if strings.Contains(t, "*/") {
				inBlock = false
			}
		case t == "", strings.HasPrefix(t, "//"):
		case strings.HasPrefix(t, "/*"):
			inBlock = !strings.Contains(t, "*/")
		default:
			return strings.HasPrefix(t, "package ")
		}
	}
	return false
}

// program is the Go file a snippet compiles as.
type program struct {
	src string
	// codeLine is the line of src holding the snippet's first line, so that
	// line L of src is line L-codeLine+1 of the snippet.
	codeLine int
}

// buildProgram turns a snippet into a compilable file (see the top of this
// file for the rules).
func buildProgram(s snippet) (program, error) {
	if isWholeFile(s.code) {
		return program{src: s.code, codeLine: 1}, nil
	}
	extra := strings.ReplaceAll(s.with, ";", "\n")

	// Top-level declarations?
	fset := token.NewFileSet()
	if f, err := parser.ParseFile(fset, "", "package p\n"+s.code, parser.SkipObjectResolution); err == nil && len(f.Decls) > 0 {
		declared := map[string]bool{}
		for _, d := range f.Decls {
			for _, n := range declNames(d) {
				declared[n] = true
			}
		}
		head := "package snippet\n\n" + contextFor(declared) + extra + "\n"
		return withImports(program{src: head + s.code, codeLine: strings.Count(head, "\n") + 1})
	}

	// A function body.
	head := "package snippet\n\n" + fragmentContext + extra + "\n\nfunc snippet() error {\n"
	src := head + s.code
	f, err := parser.ParseFile(fset, "", src+"return nil\n}\n", parser.SkipObjectResolution)
	if err != nil {
		return program{}, fmt.Errorf("%s: neither a file, declarations nor statements: %w", s, err)
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "snippet" {
			fn = fd
		}
	}
	var used []string
	seen := map[string]bool{}
	for _, st := range fn.Body.List {
		for _, n := range stmtNames(st) {
			if n != "_" && !seen[n] {
				seen[n] = true
				used = append(used, n)
			}
		}
	}
	tail := ""
	for _, n := range used {
		tail += "_ = " + n + "\n"
	}
	return withImports(program{src: src + tail + "return nil\n}\n", codeLine: strings.Count(head, "\n") + 1})
}

// contextFor returns fragmentContext without the variables a fragment
// declares itself.
func contextFor(declared map[string]bool) string {
	var b strings.Builder
	for _, l := range strings.Split(fragmentContext, "\n") {
		if f := strings.Fields(l); len(f) == 2 && declared[f[0]] {
			continue
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// declNames returns the names a top-level declaration declares.
func declNames(d ast.Decl) []string {
	var out []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil {
			out = append(out, d.Name.Name)
		}
	case *ast.GenDecl:
		for _, sp := range d.Specs {
			switch sp := sp.(type) {
			case *ast.ValueSpec:
				for _, n := range sp.Names {
					out = append(out, n.Name)
				}
			case *ast.TypeSpec:
				out = append(out, sp.Name.Name)
			}
		}
	}
	return out
}

// stmtNames returns the variables a statement declares in its own scope.
func stmtNames(st ast.Stmt) []string {
	var out []string
	switch st := st.(type) {
	case *ast.AssignStmt:
		if st.Tok == token.DEFINE {
			for _, e := range st.Lhs {
				if id, ok := e.(*ast.Ident); ok {
					out = append(out, id.Name)
				}
			}
		}
	case *ast.DeclStmt:
		if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
			out = append(out, declNames(gd)...)
		}
	}
	return out
}

// withImports adds an import for every package name of knownImports that
// p's source refers to without declaring it.
func withImports(p program) (program, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", p.src, 0)
	if err != nil {
		return program{}, err
	}
	need := map[string]bool{}
	for _, id := range f.Unresolved {
		if _, ok := knownImports[id.Name]; ok {
			need[id.Name] = true
		}
	}
	if len(need) == 0 {
		return p, nil
	}
	names := make([]string, 0, len(need))
	for n := range need {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("import (\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%s %q\n", n, knownImports[n])
	}
	b.WriteString(")\n")
	imports := b.String()
	// After the package clause, which is the first line.
	nl := strings.IndexByte(p.src, '\n')
	return program{
		src:      p.src[:nl+1] + "\n" + imports + p.src[nl+1:],
		codeLine: p.codeLine + 1 + strings.Count(imports, "\n"),
	}, nil
}

// docFiles returns the Markdown files whose snippets must compile, relative
// to this module.
func docFiles(t *testing.T) []string {
	files, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	return append([]string{"../README.md"}, files...)
}

// docSnippets returns the ```go blocks of README.md and docs/*.md.
func docSnippets(t *testing.T) []snippet {
	var all []snippet
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		require.NoError(t, err)
		snippets, err := extractSnippets(strings.TrimPrefix(file, "../"), string(text))
		require.NoError(t, err)
		all = append(all, snippets...)
	}
	return all
}

// writeOverlay writes overlay (the path of each generated file in this
// module: the file in tmp holding it) as the go command's -overlay file in
// tmp and returns its path.
func writeOverlay(t *testing.T, tmp string, overlay map[string]string) string {
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	path := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(path, ov, 0o600))
	return path
}

// TestDocSnippetsCompile builds every ```go block of README.md and docs/*.md
// in one go build.
func TestDocSnippetsCompile(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to build the snippets")
	moduleDir, err := os.Getwd()
	require.NoError(t, err)

	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	where := map[string]snippet{} // generated file name -> snippet
	lines := map[string]int{}     // generated file name -> codeLine
	snippets := docSnippets(t)
	for _, s := range snippets {
		if s.skip != "" {
			t.Logf("%s: not compiled: %s", s, s.skip)
			continue
		}
		p, err := buildProgram(s)
		require.NoError(t, err)
		name := strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(strings.ToLower(s.file)) + "_l" + strconv.Itoa(s.line)
		dir := "docsnippets/" + name
		src := filepath.Join(tmp, name+".go")
		require.NoError(t, os.WriteFile(src, []byte(p.src), 0o600))
		overlay[filepath.Join(moduleDir, dir, "snippet.go")] = src
		pkgs = append(pkgs, "./"+dir)
		where[name] = s
		lines[name] = p.codeLine
	}
	require.NotEmpty(t, pkgs, "no Go snippet found in the documentation")
	t.Logf("%d snippets, %d compiled, %d skipped", len(snippets), len(pkgs), len(snippets)-len(pkgs))
	ovPath := writeOverlay(t, tmp, overlay)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// go list -export compiles every package, as go build would, without
	// linking the programs (which would cost a second or two each).
	args := append([]string{"list", "-export", "-f", "{{.ImportPath}}", "-overlay", ovPath}, raceFlags...)
	cmd := exec.CommandContext(ctx, goBin, append(args, pkgs...)...)
	cmd.Dir = moduleDir
	var out bytes.Buffer
	cmd.Stderr = &out // stdout lists the packages
	start := time.Now()
	err = cmd.Run()
	t.Logf("compiling %d snippets: %s", len(pkgs), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("a documentation snippet does not compile (%v):\n%s\n"+
			"Fix the snippet; or, on the line before its fence, declare what it assumes with\n"+
			"<!-- snippet: with var x T -->, or leave it out with <!-- snippet: skip REASON -->\n"+
			"(see the top of examples/readme_test.go). A package of another module must be\n"+
			"required in examples/go.mod (and imported by readme_test.go to stay there).", err, explain(out.String(), tmp, where, lines))
	}
}

// explain rewrites go build's positions in the generated files (the
// overlay's sources, named after the snippets) into positions in the
// Markdown files.
func explain(out, tmp string, where map[string]snippet, lines map[string]int) string {
	// The compiler names the overlay's source; the go command the overlaid
	// path.
	pos := regexp.MustCompile(`(?:` + regexp.QuoteMeta(tmp+string(filepath.Separator)) + `|(?:\S*/)?docsnippets/)([a-z0-9_]+)(?:\.go|/snippet\.go):(\d+)(:\d+)?`)
	return pos.ReplaceAllStringFunc(out, func(m string) string {
		sm := pos.FindStringSubmatch(m)
		s, ok := where[sm[1]]
		if !ok {
			return m
		}
		n, _ := strconv.Atoi(sm[2])
		rel := n - lines[sm[1]] // 0 on the snippet's first line
		if rel < 0 {
			return fmt.Sprintf("%s (line %d of the generated file, before the snippet)", s, n)
		}
		return fmt.Sprintf("%s:%d%s", s.file, s.line+1+rel, sm[3])
	})
}

// outputOf returns the lines a whole-program snippet says it prints: the
// comment lines after a line "// Output:", as in an Example function, up to
// the first line that is not a comment; ok is false when it has none.
func outputOf(code string) (want string, ok bool) {
	var out []string
	for _, l := range strings.Split(code, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case t == "// Output:":
			ok, out = true, nil
		case ok && strings.HasPrefix(t, "//"):
			out = append(out, strings.TrimPrefix(strings.TrimPrefix(t, "//"), " "))
		case ok:
			return strings.Join(out, "\n"), true
		}
	}
	return strings.Join(out, "\n"), ok
}

// TestDocProgramsRun runs every whole program of README.md and docs/*.md
// that says what it prints (a "// Output:" comment, as an Example has) and
// requires exactly that on its standard output, so that a newcomer's first
// run of a documented program does what the page says.
func TestDocProgramsRun(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to run the programs")
	moduleDir, err := os.Getwd()
	require.NoError(t, err)
	tmp := t.TempDir()
	overlay := map[string]string{}
	var programs []snippet
	for _, s := range docSnippets(t) {
		if _, ok := outputOf(s.code); ok && s.skip == "" && isWholeFile(s.code) {
			name := fmt.Sprintf("docprogram%d", len(programs))
			src := filepath.Join(tmp, name+".go")
			require.NoError(t, os.WriteFile(src, []byte(s.code), 0o600))
			overlay[filepath.Join(moduleDir, "docsnippets", name, "main.go")] = src
			programs = append(programs, s)
		}
	}
	require.NotEmpty(t, programs, "no documented program says what it prints (docs/keylevel.md has one)")
	ovPath := writeOverlay(t, tmp, overlay)
	for i, s := range programs {
		t.Run(s.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, goBin, "run", "-overlay", ovPath, fmt.Sprintf("./docsnippets/docprogram%d", i))
			cmd.Dir = moduleDir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "%s: go run: %s", s, stderr.String())
			want, _ := outputOf(s.code)
			require.Equal(t, want, strings.TrimRight(stdout.String(), "\n"), "%s prints otherwise than its Output comment says", s)
		})
	}
}

// TestReadmeQuickstarts checks that the README keeps a whole program for
// every adapter and one for the Redis store, so that the quickstarts cannot
// silently become fragments.
func TestReadmeQuickstarts(t *testing.T) {
	text, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	snippets, err := extractSnippets("README.md", string(text))
	require.NoError(t, err)
	wholeFiles := ""
	for _, s := range snippets {
		require.Empty(t, s.skip, "%s: README snippets must all compile", s)
		if isWholeFile(s.code) {
			wholeFiles += s.code
		}
	}
	for _, pkg := range []string{"adapters/httplimit", "adapters/ginlimit", "adapters/echolimit", "adapters/fiberlimit", "adapters/grpclimit", "core/redisstore"} {
		require.Contains(t, wholeFiles, `"github.com/sluicehq/sluice/`+pkg+`"`, "README has no whole program using %s", pkg)
	}
}

func TestExtractSnippets(t *testing.T) {
	tests := []struct {
		name string
		md   string
		want []snippet
	}{
		{
			name: "plain block, other languages ignored",
			md:   "# t\n\n```sh\nmake test\n```\n\n```go\nx := 1\n```\n",
			want: []snippet{{file: "f.md", line: 7, code: "x := 1\n"}},
		},
		{
			name: "indented fence in a list, tildes",
			md:   "- item\n\n  ~~~go\n  if x {\n  \ty()\n  }\n  ~~~\n",
			want: []snippet{{file: "f.md", line: 3, code: "if x {\n\ty()\n}\n"}},
		},
		{
			name: "a longer fence holds a shorter one",
			md:   "````go\na()\n```\nb()\n````\n",
			want: []snippet{{file: "f.md", line: 1, code: "a()\n```\nb()\n"}},
		},
		{
			name: "markers",
			md:   "<!-- snippet: skip uses ulule -->\n\n```go\nu()\n```\n<!-- snippet: with var r *gin.Engine -->\n```go\nr.Use()\n```\n<!-- other -->\n```go\nz()\n```\n",
			want: []snippet{
				{file: "f.md", line: 3, code: "u()\n", skip: "uses ulule"},
				{file: "f.md", line: 7, code: "r.Use()\n", with: "var r *gin.Engine"},
				{file: "f.md", line: 11, code: "z()\n"},
			},
		},
		{
			name: "go with attributes, not golang or gomod",
			md:   "```go title=x\na()\n```\n```gomod\nmodule m\n```\n",
			want: []snippet{{file: "f.md", line: 1, code: "a()\n"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := extractSnippets("f.md", tt.md)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}

	_, err := extractSnippets("f.md", "```go\nnever closed\n")
	require.ErrorContains(t, err, "f.md:1: code block never closed")
}

func TestBuildProgram(t *testing.T) {
	tests := []struct {
		name     string
		code     string
		with     string
		contains []string
		absent   []string
	}{
		{
			name:     "whole file kept as is",
			code:     "// Command x.\npackage main\n\nfunc main() {}\n",
			contains: []string{"// Command x.\npackage main\n\nfunc main() {}\n"},
			absent:   []string{"import"},
		},
		{
			name:     "statements: wrapped, imports added, declared variables used",
			code:     "s, err := memorystore.New()\nif err != nil {\n\treturn err\n}\nl := time.Second\n",
			contains: []string{`memorystore "github.com/sluicehq/sluice/core/memorystore"`, `time "time"`, "func snippet() error {", "_ = s\n_ = err\n_ = l\nreturn nil\n}"},
			absent:   []string{`"fmt"`},
		},
		{
			name:     "declarations: at top level, context without the names they declare",
			code:     "type Func func(keyfunc.Request) (string, error)\n\nvar limiter = 3\n",
			contains: []string{`keyfunc "github.com/sluicehq/sluice/keyfunc"`, "\tstore      core.Store\n", "type Func func"},
			absent:   []string{"func snippet", "limiter    *core.Limiter"},
		},
		{
			name:     "with adds declarations and their imports",
			code:     "r.Use(ginlimit.New(limiter))\n",
			with:     "var r *gin.Engine",
			contains: []string{"var r *gin.Engine", `gin "github.com/gin-gonic/gin"`, `ginlimit "github.com/sluicehq/sluice/adapters/ginlimit"`},
		},
		{
			name:     "a local name shadows a package name",
			code:     "log := 3\nfmt.Println(log)\n",
			contains: []string{`fmt "fmt"`},
			absent:   []string{`"log"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := buildProgram(snippet{file: "f.md", line: 1, code: tt.code, with: tt.with})
			require.NoError(t, err)
			for _, c := range tt.contains {
				require.Contains(t, p.src, c)
			}
			for _, a := range tt.absent {
				require.NotContains(t, p.src, a)
			}
			_, err = parser.ParseFile(token.NewFileSet(), "", p.src, 0)
			require.NoError(t, err)
			first := strings.SplitN(tt.code, "\n", 2)[0]
			require.Equal(t, first, strings.Split(p.src, "\n")[p.codeLine-1], "codeLine points at the snippet's first line")
		})
	}

	_, err := buildProgram(snippet{file: "f.md", line: 4, code: "this is not Go\n"})
	require.ErrorContains(t, err, "f.md:4: neither a file, declarations nor statements")
}
