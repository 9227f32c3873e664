package config_test

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/rulefile/rulefiletest"
)

// TestDocsConfigFilesLoad: every config file docs/config.md shows loads as
// it is written, in today's names (no deprecation notice); the failure
// section, shown on its own, loads beside a policy.
func TestDocsConfigFilesLoad(t *testing.T) {
	text, err := os.ReadFile("../docs/config.md")
	require.NoError(t, err)
	blocks := rulefiletest.YAMLBlocks(string(text))
	require.Len(t, blocks, 2, "the policies and the failure section")
	for _, b := range blocks {
		if !strings.Contains(b, "policies:") {
			require.True(t, strings.HasPrefix(b, "failure:"), b)
			b += "policies: [{name: a, key: ip, limit: 1, window_seconds: 1}]\n"
		}
		var log bytes.Buffer
		f, err := config.ParseFile("config.md", []byte(b), config.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
		require.NoError(t, err, b)
		require.Empty(t, f.Deprecated, b)
		require.Empty(t, log.String())
		require.NotEmpty(t, f.Policies)
	}
}
