package rules_test

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/rulefile/rulefiletest"
	"github.com/sluicehq/sluice/service/rules"
)

// TestDocsRulesFilesLoad: the rules files docs/service.md and the package
// documentation show load as they are written, in today's names (no
// deprecation notice).
func TestDocsRulesFilesLoad(t *testing.T) {
	var files []string
	text, err := os.ReadFile("../../docs/service.md")
	require.NoError(t, err)
	for _, b := range rulefiletest.YAMLBlocks(string(text)) {
		if strings.HasPrefix(b, "rules:") {
			files = append(files, b)
		}
	}
	require.NotEmpty(t, files, "docs/service.md's rules files")
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var b strings.Builder
	for _, line := range strings.Split(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "//\t"); ok && (b.Len() > 0 || rest == "rules:") {
			b.WriteString(rest + "\n")
		} else if b.Len() > 0 {
			break
		}
	}
	files = append(files, b.String(), string(rules.Example()))
	for _, f := range files {
		var log bytes.Buffer
		s, err := rules.Parse("doc.yaml", []byte(f), rules.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
		require.NoError(t, err, f)
		require.NotEmpty(t, s.Rules())
		require.Empty(t, log.String(), f)
	}
}
