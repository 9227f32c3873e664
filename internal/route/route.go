// Package route holds the rules of the route patterns of core.Match.Routes,
// shared by core (which compiles them) and config (which checks a file's
// patterns where they are written).
package route

import (
	"fmt"
	"strings"
)

// Validate reports why a route pattern cannot match anything.
func Validate(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("Routes: pattern %q must start with /", p)
	}
	segs := Split(p)
	for i, s := range segs {
		switch {
		case s == "":
			return fmt.Errorf("Routes: pattern %q has an empty segment", p)
		case s == "**" && i != len(segs)-1:
			return fmt.Errorf("Routes: pattern %q: ** must be the last segment", p)
		case strings.Contains(s, "*") && s != "*" && s != "**":
			return fmt.Errorf("Routes: pattern %q: * must be a whole segment", p)
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
