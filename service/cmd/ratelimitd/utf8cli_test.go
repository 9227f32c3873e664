package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/rawtext/rawtexttest"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// `ratelimitd rules import` refuses a file with text that is not valid
// UTF-8 in a string field of a rule, naming the rule and the field, and
// imports nothing; an --actor that is not UTF-8 is refused before the
// database is touched. Before, the name was stored as U+FFFD (SQLite) or
// the import failed inside PostgreSQL. On SQLite every invalid sequence
// and unpaired surrogate escape is sent, each in one field and every
// field in turn (rulesdb's TestReadRulesRefusesInvalidUTF8 tries each in
// every field); on PostgreSQL one in each field.
func TestRulesImportRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	samples := append(append([]rawtexttest.Sample{}, rawtexttest.Invalid...), rawtexttest.Escapes...)
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testRulesImportUTF8(t, "file:"+filepath.Join(t.TempDir(), "rules.db"), samples)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		testRulesImportUTF8(t, pg.NewDatabase(t), samples[:len(ruleStringFields)])
	})
}

// ruleStringFields are the string fields of a rule in the import's JSON,
// each with a valid value.
var ruleStringFields = map[string]string{"id": `"b"`, "name": `"B"`, "dimension": `"ip"`, "endpoint_pattern": `"/b/**"`, "algorithm": `"gcra"`, "tier": `""`}

// testRulesImportUTF8 imports a file for each of samples, its invalid text
// in one string field of a rule, every field in turn.
func testRulesImportUTF8(t *testing.T, dsn string, samples []rawtexttest.Sample) {
	dir := t.TempDir()
	good := `{"id": "a", "name": "A", "dimension": "ip", "endpoint_pattern": "/a/**", "limit": 5, "window_seconds": 60, "algorithm": "gcra", "tier": ""}`
	fields := ruleStringFields
	names := slices.Sorted(maps.Keys(fields))
	file := filepath.Join(dir, "rules.json")
	require.GreaterOrEqual(t, len(samples), len(names), "every field gets a sample")
	for i, s := range samples {
		f := names[i%len(names)]
		var b strings.Builder
		b.WriteString("[" + good + `, {"limit": 5, "window_seconds": 60`)
		for g, v := range fields {
			if g == f {
				v = `"x` + s.Bytes + `"`
			}
			b.WriteString(`, "` + g + `": ` + v)
		}
		b.WriteString("}]")
		require.NoError(t, os.WriteFile(file, []byte(b.String()), 0o600))
		code, out, errOut := runRules(t, "import", file, "--db", dsn)
		require.Equal(t, 1, code, "%s in %s: %s", s.Name, f, errOut)
		require.Contains(t, errOut, "rules[1]."+f+": ", "%s in %s", s.Name, f)
		require.Empty(t, out)
	}
	require.NoError(t, os.WriteFile(file, []byte("["+good+"]"), 0o600))
	code, _, errOut := runRules(t, "import", file, "--db", dsn, "--actor", "ops\xff")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--actor")
	code, out, _ := runRules(t, "export", "--db", dsn)
	require.Equal(t, 0, code)
	require.Equal(t, "[]\n", out, "nothing imported")
}

// The token commands refuse a name or scope that is not valid UTF-8
// (names are A-Z a-z 0-9 _ . -), quoting it in the error, and create
// nothing; an OS user name that is not UTF-8 is quoted in the actor.
func TestTokenCommandsRefuseInvalidUTF8(t *testing.T) {
	t.Parallel()
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	for _, s := range rawtexttest.Invalid {
		code, out, errOut := runCmd(t, nil, "token", "create", "ci"+s.Bytes, "--scope", "write", "--db", dsn)
		require.NotEqual(t, 0, code, s.Name)
		require.Empty(t, out, s.Name)
		require.Contains(t, errOut, "name", s.Name)
		require.True(t, strings.Contains(errOut, `\x`), "%s: the name is quoted: %q", s.Name, errOut)
		code, out, errOut = runCmd(t, nil, "token", "create", "ci", "--scope", "write"+s.Bytes, "--db", dsn)
		require.NotEqual(t, 0, code, s.Name)
		require.Empty(t, out, s.Name)
		require.Contains(t, errOut, "scope", s.Name)
		code, _, _ = runCmd(t, nil, "token", "revoke", "ci"+s.Bytes, "--db", dsn)
		require.NotEqual(t, 0, code, s.Name)
	}
	db, err := rulesdb.Open(dbctx(t), dsn)
	require.NoError(t, err)
	defer db.Close()
	toks, err := db.Tokens(dbctx(t))
	require.NoError(t, err)
	require.Empty(t, toks)

	require.Equal(t, "cli:ops", cliName("ops"))
	require.Equal(t, "cli:jürgen", cliName("jürgen"))
	require.Equal(t, `cli:"ops\xff"`, cliName("ops\xff"))
	require.Equal(t, `cli:"a\nb"`, cliName("a\nb"))
}
