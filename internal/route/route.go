// Package route holds the rules of the route patterns of core.Match.Routes,
// shared by core (which compiles them into a Trie), config (which checks a
// file's patterns where they are written) and ratelimitd's rules (which match
// endpoints with the same Trie, so a pattern means the same everywhere).
package route

import (
	"fmt"
	"strings"
)

// Validate reports why a route pattern cannot match anything; the error
// says what is wrong with the pattern, and its callers name the field.
func Validate(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("pattern %q must start with /", p)
	}
	segs := Split(p)
	for i, s := range segs {
		switch {
		case s == "":
			return fmt.Errorf("pattern %q has an empty segment", p)
		case s == "**" && i != len(segs)-1:
			return fmt.Errorf("pattern %q: ** must be the last segment", p)
		case strings.Contains(s, "*") && s != "*" && s != "**":
			return fmt.Errorf("pattern %q: * must be a whole segment", p)
		}
	}
	return nil
}

// Split returns the segments of a pattern, without its leading "/".
func Split(p string) []string {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// Trie matches paths against many route patterns at once, each pattern
// inserted under the index of what it belongs to (a policy, a rule).
// Matching a path walks its segments once per branch that can match it, so
// its cost follows the depth of the path, not the number of patterns. The
// zero value is empty and ready; a Trie must not be changed while it is
// matched.
type Trie struct {
	lit  map[string]*Trie
	any  *Trie // one segment of any value
	rest []int // indices whose pattern ends with "**" here
	end  []int // indices whose pattern ends exactly here
	all  []int // (root only) indices that match every path
}

// InsertAll adds index id as matching every path (no route pattern).
func (t *Trie) InsertAll(id int) { t.all = append(t.all, id) }

// NumAll reports how many indices were added with InsertAll.
func (t *Trie) NumAll() int { return len(t.all) }

// Insert adds pattern (valid under Validate) for index id.
func (t *Trie) Insert(pattern string, id int) {
	n := t
	for _, s := range Split(pattern) {
		switch {
		case s == "**":
			n.rest = append(n.rest, id)
			return
		case s == "*" || strings.HasPrefix(s, ":") || (strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}")):
			if n.any == nil {
				n.any = &Trie{}
			}
			n = n.any
		default:
			if n.lit == nil {
				n.lit = map[string]*Trie{}
			}
			c := n.lit[s]
			if c == nil {
				c = &Trie{}
				n.lit[s] = c
			}
			n = c
		}
	}
	n.end = append(n.end, id)
}

// Match calls add for every index whose pattern matches path (an index may
// be reported more than once).
func (t *Trie) Match(path string, add func(int)) {
	for _, p := range t.all {
		add(p)
	}
	t.walk(strings.TrimPrefix(path, "/"), add)
}

func (t *Trie) walk(rest string, add func(int)) {
	for _, p := range t.rest {
		add(p)
	}
	if rest == "" {
		for _, p := range t.end {
			add(p)
		}
		return
	}
	seg, tail, _ := strings.Cut(rest, "/")
	if c := t.lit[seg]; c != nil {
		c.walk(tail, add)
	}
	if t.any != nil && seg != "" {
		t.any.walk(tail, add)
	}
}
