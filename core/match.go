package core

import (
	"strings"

	"github.com/sluicehq/sluice/internal/route"
)

// Match says which requests a policy applies to. The zero value matches
// every request.
type Match struct {
	// Methods, if any, are the HTTP methods (or "POST" for gRPC) matched,
	// case-insensitively.
	Methods []string
	// Routes, if any, are path patterns matched against the request path:
	// segments are literal, "*" or ":name" or "{name}" (any one segment), and
	// a final "**" (any rest, including nothing). "/api/**" matches "/api"
	// and everything below it. gRPC paths are "/pkg.Service/Method".
	Routes []string
}

// trie matches paths against the route patterns of every policy. Matching a
// path walks its segments once per branch that can match it, so its cost
// follows the depth of the path, not the number of rules.
type trie struct {
	lit  map[string]*trie
	any  *trie // one segment of any value
	rest []int // policies whose pattern ends with "**" here
	end  []int // policies whose pattern ends exactly here
	all  []int // (root only) policies with no route pattern
}

func (t *trie) insert(pattern string, policy int) {
	n := t
	for _, s := range route.Split(pattern) {
		switch {
		case s == "**":
			n.rest = append(n.rest, policy)
			return
		case s == "*" || strings.HasPrefix(s, ":") || (strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}")):
			if n.any == nil {
				n.any = &trie{}
			}
			n = n.any
		default:
			if n.lit == nil {
				n.lit = map[string]*trie{}
			}
			c := n.lit[s]
			if c == nil {
				c = &trie{}
				n.lit[s] = c
			}
			n = c
		}
	}
	n.end = append(n.end, policy)
}

// match calls add for every policy whose pattern matches path (a policy may
// be reported more than once).
func (t *trie) match(path string, add func(int)) {
	for _, p := range t.all {
		add(p)
	}
	t.walk(strings.TrimPrefix(path, "/"), add)
}

func (t *trie) walk(rest string, add func(int)) {
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
