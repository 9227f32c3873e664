package rulefile_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rulefile"
)

// scalar is the node of a YAML scalar as a file writes it.
func scalar(t *testing.T, text string) *yaml.Node {
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal([]byte("v: "+text+"\n"), &doc), text)
	return doc.Content[0].Content[1]
}

// TestSeconds: window_seconds reads whole and decimal seconds exactly to
// the microsecond, and refuses everything else at its line: zero, negative,
// finer than a microsecond (never rounded), strings, durations, too long.
func TestSeconds(t *testing.T) {
	good := map[string]time.Duration{
		"1": time.Second, "60": time.Minute, "3600": time.Hour, "86400": 24 * time.Hour, "0.5": 500 * time.Millisecond,
		".25": 250 * time.Millisecond, "1.5e-3": 1500 * time.Microsecond, "1e3": 1000 * time.Second, "0x10": 16 * time.Second,
		"0.000001": time.Microsecond, "1.0": time.Second, "9223372036": 9223372036 * time.Second, "+2": 2 * time.Second,
	}
	for text, want := range good {
		p := rulefile.NewParser("rules file", "f.yaml")
		got, ok := p.Seconds(scalar(t, text), "window_seconds")
		require.NoError(t, p.Err(), text)
		require.True(t, ok, text)
		require.Equal(t, want, got, text)
	}
	bad := map[string]string{
		"0": "must be a positive number of seconds", "-1": "positive", "-0.5": "positive", "0.0000001": "must be a whole number of microseconds",
		"1.0000005": "whole number of microseconds", `"60"`: "positive number", "1m": "positive number", "60s": "positive number",
		"[60]": "positive number", "true": "positive number", ".inf": "positive number", ".nan": "positive number", "~": "positive number",
		"9223372037": "at most 9223372036 seconds", "1e300": "at most", "1e-300": "whole number of microseconds",
		"1" + strings.Repeat("0", 70) + ".5": "positive number",
	}
	for text, want := range bad {
		p := rulefile.NewParser("rules file", "f.yaml")
		_, ok := p.Seconds(scalar(t, text), "rules[0].window_seconds")
		require.False(t, ok, text)
		require.ErrorContains(t, p.Err(), "rules file f.yaml:1: rules[0].window_seconds: must be ", text)
		require.ErrorContains(t, p.Err(), want, text)
	}
}

// TestSecondsProperty: every whole number of microseconds, written as
// seconds with up to six decimals, reads back as itself; a seventh
// nonzero decimal is refused.
func TestSecondsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 22))
	for range 5000 {
		us := 1 + rng.Int64N(1e15)
		text := fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
		p := rulefile.NewParser("x", "f")
		got, ok := p.Seconds(scalar(t, text), "w")
		require.True(t, ok, text)
		require.Equal(t, time.Duration(us)*time.Microsecond, got, text)
		finer := text + fmt.Sprint(1+rng.IntN(9))
		_, ok = p.Seconds(scalar(t, finer), "w")
		require.False(t, ok, finer)
	}
}

// TestSyntaxErrorLine: a YAML syntax error is reported at the line it is
// on, wherever it is in the file, for each kind of error go-yaml reports
// (go-yaml itself names the line before the enclosing collection).
func TestSyntaxErrorLine(t *testing.T) {
	o := rulefile.NewOptions("rules file")
	filler := func(n int) string { return strings.Repeat("  - {a: 1}\n", n) }
	for _, c := range []struct {
		doc  string
		line int
	}{
		{"list:\n" + filler(30) + " - {a: 2}\n" + filler(5), 32},
		{"list:\n" + filler(30) + "  - a: 1\n      b: 2\n" + filler(5), 33},
		{"top:\n  a: 1\n" + strings.Repeat("  x: 1\n", 40) + " b: 2\n", 43},
		{"list:\n" + filler(10) + "  - [1, 2\n" + filler(10), 12},
		{"list:\n" + filler(10) + "\t- {a: 1}\n", 12},
		{"list:\n" + filler(10) + "  - {a: \"open\n" + filler(3), 12},
		{"a: 1\nb: [\n", 2},
		{"a: 1\nb: @x\n", 2},
	} {
		_, err := o.Decode("f.yaml", []byte(c.doc))
		require.Error(t, err, c.doc)
		require.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("rules file f.yaml:%d: not valid YAML: ", c.line)), "want line %d: %v\n%s", c.line, err, c.doc)
		require.NotContains(t, err.Error(), "line ", "go-yaml's own line is left out: %v", err)
	}
	_, err := o.Decode("f.yaml", []byte("# nothing\n"))
	require.EqualError(t, err, "rules file f.yaml: empty file")
}

// TestFields: a mapping's keys are known, given once, and a renamed field
// is read under either name, never both; old names are in the notice, in
// the order of the file, with their count.
func TestFields(t *testing.T) {
	known := []rulefile.Field{{Name: "name"}, {Name: "limit", Old: "rate"}, {Name: "window_seconds", Old: "period"}}
	read := func(doc string) (*rulefile.Parser, rulefile.Mapping) {
		var n yaml.Node
		require.NoError(t, yaml.Unmarshal([]byte(doc), &n))
		p := rulefile.NewParser("config:", "f.yaml")
		m, _ := p.Fields(n.Content[0], "policies[0]", known)
		return p, m
	}
	p, m := read("name: a\nrate: 5\nperiod: 1s\n")
	require.NoError(t, p.Err())
	require.Equal(t, "5", m.Get("limit").Value)
	require.Equal(t, "policies[0].rate", m.Path("limit"), "errors name the field as written")
	require.Equal(t, "policies[0].window_seconds", rulefile.Join("policies[0]", "window_seconds"))
	require.Nil(t, m.Get("rate"), "a field is found under its name now")
	require.Equal(t, "config: f.yaml: deprecated field names, still read with the same meaning: rate (line 2) is now limit, period (line 3) is now window_seconds", p.Notice())

	p, _ = read("{period: 1s, rate: 5}")
	require.Contains(t, p.Notice(), "meaning: period (line 1) is now window_seconds, rate (line 1) is now limit", "in the file's order")

	p, _ = read("name: a\nlimit: 5\nwindow_seconds: 1\n")
	require.NoError(t, p.Err())
	require.Empty(t, p.Notice())

	p, _ = read("name: a\nname: b\ncolour: red\nlimit: 1\nrate: 1\n")
	require.EqualError(t, p.Err(), strings.Join([]string{
		"config: f.yaml:2: policies[0].name: given twice",
		"config: f.yaml:3: policies[0].colour: unknown field (known: name, limit, window_seconds)",
		"config: f.yaml:5: policies[0].rate: rate and limit (line 4) are one field, rate its deprecated name: give it once, as limit",
	}, "\n"))

	p, _ = read("- a\n")
	require.EqualError(t, p.Err(), "config: f.yaml:1: policies[0]: must be a mapping")
}

// TestLegacyBool: YAML 1.1's words for true and false read as go-yaml
// reads them into a Go bool, each noted once per word; anything else but
// true and false is refused.
func TestLegacyBool(t *testing.T) {
	for text, want := range map[string]bool{"true": true, "false": false, "yes": true, "Yes": true, "on": true, "ON": true, "y": true,
		"no": false, "Off": false, "n": false, "'yes'": true} {
		p := rulefile.NewParser("config:", "f.yaml")
		got, ok := p.LegacyBool(scalar(t, text), "policies[0].shadow")
		require.True(t, ok, text)
		require.Equal(t, want, got, text)
		if text == "true" || text == "false" {
			require.Empty(t, p.Notice())
		} else {
			require.Contains(t, p.Notice(), fmt.Sprintf("shadow: %s (line 1) is now shadow: %t", strings.Trim(text, "'"), want))
		}
	}
	for _, text := range []string{"yEs", "1", "0", "maybe", `"true"`, "[true]", "~"} {
		p := rulefile.NewParser("config:", "f.yaml")
		_, ok := p.LegacyBool(scalar(t, text), "policies[0].shadow")
		require.False(t, ok, text)
		require.ErrorContains(t, p.Err(), "f.yaml:1: policies[0].shadow: must be true or false", text)
		_, ok = p.Bool(scalar(t, text), "s")
		require.False(t, ok, text)
	}
	p := rulefile.NewParser("rules file", "f.yaml")
	_, ok := p.Bool(scalar(t, "yes"), "rules[0].shadow")
	require.False(t, ok, "Bool is strict")
}

// TestReadFile: the size cap, and a missing file named once.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	o := rulefile.NewOptions("rules file")
	o.SetMaxBytes("rules: WithMaxBytes", 4)
	path := filepath.Join(dir, "r.yaml")
	require.NoError(t, os.WriteFile(path, []byte("12345"), 0o600))
	_, err := o.ReadFile(path)
	require.EqualError(t, err, "rules file "+path+": the file is larger than 4 bytes (see WithMaxBytes)")
	require.NoError(t, os.WriteFile(path, []byte("1234"), 0o600))
	data, err := o.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "1234", string(data))
	_, err = o.ReadFile(filepath.Join(dir, "none.yaml"))
	require.EqualError(t, err, "rules file "+filepath.Join(dir, "none.yaml")+": no such file or directory")
	require.ErrorIs(t, err, os.ErrNotExist)

	o.SetMaxBytes("rules: WithMaxBytes", 0)
	o.SetMaxItems("rules: WithMaxRules", -1)
	require.EqualError(t, o.Err(), "rules: WithMaxBytes: must be at least 1, got 0\nrules: WithMaxRules: must be at least 1, got -1")
}

// TestNoLibraryPackageImportsYAML: the root module's packages other than
// this one never import a YAML parser, so that a program using the library
// without its config file builds none (the config module and the service
// import this package).
func TestNoLibraryPackageImportsYAML(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	out, err := exec.Command(goBin, "list", "-deps", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "github.com/sluicehq/sluice/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		if !strings.HasPrefix(pkg, "github.com/sluicehq/sluice") {
			continue
		}
		checked++
		if pkg == "github.com/sluicehq/sluice/internal/rulefile" {
			continue
		}
		require.NotContains(t, " "+imports+" ", " go.yaml.in/yaml/v3 ", pkg)
		require.NotContains(t, " "+imports+" ", " github.com/sluicehq/sluice/internal/rulefile ", pkg)
	}
	require.Greater(t, checked, 10)
}
