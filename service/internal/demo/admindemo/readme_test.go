package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoFile reads a file at the repository's root.
func repoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../../../" + name)
	require.NoError(t, err)
	return string(b)
}

// makeTargets returns the targets the Makefile defines, each with its
// recipe.
func makeTargets(makefile string) map[string]string {
	targets := map[string]string{}
	var cur string
	for _, line := range strings.Split(makefile, "\n") {
		if m := regexp.MustCompile(`^([a-z][a-z0-9-]*):`).FindStringSubmatch(line); m != nil && !strings.Contains(line, ":=") {
			cur = m[1]
			targets[cur] = ""
			continue
		}
		if strings.HasPrefix(line, "\t") && cur != "" {
			targets[cur] += line + "\n"
		} else if !strings.HasPrefix(line, "#") {
			cur = ""
		}
	}
	return targets
}

// TestMakeRunsTheDemos: `make admin-demo` and `make fleet-demo` run the
// programs this package's and fleetdemo's tests run, after building the
// binary they are given.
func TestMakeRunsTheDemos(t *testing.T) {
	targets := makeTargets(repoFile(t, "Makefile"))
	for target, pkg := range map[string]string{"admin-demo": "./internal/demo/admindemo", "fleet-demo": "./internal/demo/fleetdemo"} {
		recipe, ok := targets[target]
		require.True(t, ok, "the Makefile has no target %s", target)
		require.Contains(t, recipe, "run "+pkg+" -ratelimitd ../bin/ratelimitd", target)
		require.Contains(t, targets["ratelimitd"], "-o ../bin/ratelimitd", "make ratelimitd builds what the demos run")
	}
	require.Contains(t, targets["fleet-demo"], "ensure-postgres.sh")
	require.Contains(t, targets["fleet-demo"], "ensure-redis.sh")
}

// TestReadmeCommands: every `make TARGET` the README shows is a target of
// the Makefile, and every ratelimitd command line in its code blocks names
// a subcommand ratelimitd has, with flags that subcommand accepts.
func TestReadmeCommands(t *testing.T) {
	readme := repoFile(t, "README.md")
	targets := makeTargets(repoFile(t, "Makefile"))
	makes := regexp.MustCompile("(?m)(?:^|`|&& )make ([a-z][a-z0-9-]*)").FindAllStringSubmatch(readme, -1)
	require.NotEmpty(t, makes)
	for _, m := range makes {
		_, ok := targets[m[1]]
		require.True(t, ok, "the README runs `make %s`, which the Makefile does not define", m[1])
	}

	// The subcommands, from ratelimitd's own usage.
	usage, _ := exec.Command(binary).CombinedOutput()
	subs := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+ratelimitd ([a-z]+(?: (?:import|export|create|list|revoke))?)`).FindAllStringSubmatch(string(usage), -1) {
		subs[m[1]] = true
	}
	require.True(t, subs["serve"] && subs["token create"] && subs["rules import"], "ratelimitd's usage: %s", usage)

	help := map[string]string{}
	checked := 0
	inBlock := false
	cmdRE := regexp.MustCompile(`(?:^|\s|/|&& )ratelimitd ((?:rules|token) [a-z]+|[a-z]+)\b(.*)`)
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			continue
		}
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i] // a comment
		}
		m := cmdRE.FindStringSubmatch(line)
		if m == nil || !subs[m[1]] {
			continue // not a command line (output, prose)
		}
		if _, ok := help[m[1]]; !ok {
			out, _ := exec.Command(binary, append(strings.Fields(m[1]), "-h")...).CombinedOutput()
			help[m[1]] = string(out)
		}
		for _, f := range regexp.MustCompile(`(?:^|\s)--?([a-z][a-z0-9-]*)`).FindAllStringSubmatch(m[2], -1) {
			require.Regexp(t, `(?m)^\s+--?`+regexp.QuoteMeta(f[1])+`\b`, help[m[1]],
				"the README's `ratelimitd %s ... --%s`: ratelimitd %s has no such flag", m[1], f[1], m[1])
		}
		checked++
	}
	require.Positive(t, checked, "the README shows ratelimitd command lines")
}
