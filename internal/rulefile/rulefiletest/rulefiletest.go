// Package rulefiletest holds what the tests of both readers of
// internal/rulefile (the config module's file and ratelimitd's rules file)
// share: limits written under either spelling, random valid limits, files
// broken deep inside, and the YAML blocks of the documentation.
package rulefiletest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Seconds writes d as window_seconds does: whole seconds, or a decimal
// fraction down to the microsecond.
func Seconds(d time.Duration) string {
	us := d.Microseconds()
	if us%1_000_000 == 0 {
		return fmt.Sprint(us / 1_000_000)
	}
	return strings.TrimRight(fmt.Sprintf("%d.%06d", us/1_000_000, us%1_000_000), "0")
}

// Old says which renamed fields of a limit are written under their old
// names: rate for limit, period (a Go duration) for window_seconds.
type Old struct{ Rate, Period bool }

// LimitYAML writes the fields of l, one "key: value" each, spelled per old.
func LimitYAML(l core.Limit, old Old) []string {
	out := []string{"algorithm: " + l.Algorithm.String()}
	if old.Rate {
		out = append(out, fmt.Sprintf("rate: %d", l.Rate))
	} else {
		out = append(out, fmt.Sprintf("limit: %d", l.Rate))
	}
	if old.Period {
		out = append(out, "period: "+l.Period.String())
	} else {
		out = append(out, "window_seconds: "+Seconds(l.Period))
	}
	if l.Burst != 0 {
		out = append(out, fmt.Sprintf("burst: %d", l.Burst))
	}
	return out
}

// RandomLimit returns a valid limit of algorithm a: a count, a window from
// a second's fraction to a week, and for a bucket sometimes a burst.
func RandomLimit(rng *rand.Rand, a core.Algorithm) core.Limit {
	windows := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour, 500 * time.Millisecond,
		1500 * time.Microsecond, 90 * time.Second, 7 * 24 * time.Hour, 1234567 * time.Microsecond}
	l := core.Limit{Algorithm: a, Rate: 1 + rng.Int64N(5000), Period: windows[rng.IntN(len(windows))]}
	if a.Bucket() && rng.IntN(2) == 0 {
		l.Burst = l.Rate + rng.Int64N(100)
	}
	return l
}

// Broken is one item of a list that is wrong in one place.
type Broken struct {
	// Text is the item, four lines or more, each ending in a newline.
	Text string
	// At is the line of the error, counted from the item's first (0).
	At int
}

// BrokenItems returns items broken in every way the readers report at a
// line: the YAML (an item indented one space too few or a key too many, an
// item out of its list, a tab, an unclosed list) or a field (unknown, a bad
// value in either spelling, a field given under both names, a limit core
// refuses). id is the item's own second line, "key: ip" or "dimension:
// user".
func BrokenItems(id string) map[string]Broken {
	item := func(rest string) string { return "  - name: x\n    " + id + "\n" + rest }
	return map[string]Broken{
		"item indented too few": {item("   limit: 5\n    window_seconds: 1\n"), 2},
		"key indented too many": {item("      limit: 5\n    window_seconds: 1\n"), 2},
		"out of its list":       {item("    limit: 5\n    window_seconds: 1\n - name: y\n"), 4},
		"tab":                   {item("\tlimit: 5\n    window_seconds: 1\n"), 2},
		"unclosed list":         {item("    tiers: {gold: [1, 2}\n    limit: 5\n    window_seconds: 1\n"), 2},
		"unknown field":         {item("    limit: 5\n    window_seconds: 1\n    colour: red\n"), 4},
		"bad value":             {item("    limit: 5\n    window_seconds: 1m\n"), 3},
		"bad old value":         {item("    rate: 5\n    period: 60\n"), 3},
		"mixed spelling":        {item("    limit: 5\n    window_seconds: 1\n    rate: 5\n"), 4},
		"core refusal":          {item("    algorithm: fixed_window\n    limit: 5\n    window_seconds: 1\n    burst: 9\n"), 5},
	}
}

// DeepFile returns a file whose list field holds n valid items (each
// "name", id, "limit", "window_seconds") with b in place of the item k,
// and the line of b's error.
func DeepFile(field, id string, n, k int, b Broken) (doc string, line int) {
	var s strings.Builder
	fmt.Fprintf(&s, "# items of four lines each\n%s:\n", field)
	for i := range n {
		if i == k {
			line = 3 + 4*k + b.At
			s.WriteString(b.Text)
			continue
		}
		fmt.Fprintf(&s, "  - name: item%d\n    %s\n    limit: %d\n    window_seconds: 60\n", i, id, i+1)
	}
	return s.String(), line
}

// Mixed is a file giving one field under both its names, and the error's
// place and text after the file's name.
type Mixed struct{ Doc, Want string }

// MixedSpellings returns files of one item (in the list field, its own
// line id) whose limit, or a tier's, gives a field under its old and its
// new name, in either order.
func MixedSpellings(field, id string) []Mixed {
	head := field + ":\n  - name: a\n    " + id + "\n"
	item := field + "[0]"
	return []Mixed{
		{head + "    limit: 5\n    rate: 5\n    window_seconds: 1\n",
			":5: " + item + ".rate: rate and limit (line 4) are one field, rate its deprecated name: give it once, as limit"},
		{head + "    rate: 5\n    window_seconds: 1\n    limit: 6\n",
			":6: " + item + ".limit: limit and rate (line 4) are one field, rate its deprecated name: give it once, as limit"},
		{head + "    limit: 5\n    window_seconds: 1\n    period: 1s\n",
			":6: " + item + ".period: period and window_seconds (line 5) are one field, period its deprecated name: give it once, as window_seconds"},
		{head + "    limit: 5\n    window_seconds: 1\n    tiers:\n      pro: {limit: 9, period: 1s, window_seconds: 1}\n",
			":7: " + item + ".tiers.pro.window_seconds: window_seconds and period (line 7) are one field, period its deprecated name: give it once, as window_seconds"},
		{head + "    limit: 5\n    window_seconds: 1\n    tiers:\n      pro: {rate: 9, limit: 9, window_seconds: 1}\n",
			":7: " + item + ".tiers.pro.limit: limit and rate (line 7) are one field"},
	}
}

// Replace writes doc to path as an editor or a deploy tool does: into a
// file beside it, renamed over it, so that a reader never sees half of it.
func Replace(t testing.TB, path, doc string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// YAMLBlocks returns the ```yaml blocks of a Markdown text, verbatim.
func YAMLBlocks(markdown string) []string {
	var out []string
	var cur *strings.Builder
	for _, line := range strings.SplitAfter(markdown, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```yaml":
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	return out
}
