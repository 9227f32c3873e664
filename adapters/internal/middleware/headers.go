package middleware

import (
	"strings"
	"unsafe"

	"github.com/sluicehq/sluice/internal/fieldfmt"
)

// The header lookups of a framework whose header values are valid until
// the handler returns (fasthttp), as the keyfunc.Request contract allows:
// the strings alias the framework's bytes, without a copy. v is the
// framework's own lookup of the header name (exact unless it normalizes
// names); when it finds nothing and exact is set (Fiber's
// DisableHeaderNormalizing), the lines visitAll visits (as fasthttp's
// RequestHeader.VisitAll does) are scanned for the name, ignoring case.

// Header returns the first value of the header name: v, else the first
// line scanned.
func Header(v []byte, exact bool, visitAll func(func(k, v []byte)), name string) string {
	if v != nil {
		return str(v)
	}
	if vals := scanHeader(exact, visitAll, name, 1); len(vals) > 0 {
		return vals[0]
	}
	return ""
}

// HeaderValues returns every line of the header name: lines (the
// framework's lookup, in its scratch space: converted now), else those
// scanned.
func HeaderValues(lines [][]byte, exact bool, visitAll func(func(k, v []byte)), name string) []string {
	if len(lines) == 0 {
		return scanHeader(exact, visitAll, name, -1)
	}
	vals := make([]string, len(lines))
	for i, v := range lines {
		vals[i] = str(v)
	}
	return vals
}

// scanHeader returns up to n (all if n < 0) lines of the header name when
// exact is set.
func scanHeader(exact bool, visitAll func(func(k, v []byte)), name string, n int) []string {
	if !exact {
		return nil
	}
	var vals []string
	visitAll(func(k, v []byte) {
		if len(vals) != n && strings.EqualFold(str(k), name) {
			vals = append(vals, str(v))
		}
	})
	return vals
}

func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// Bytes is s's bytes, for a framework's setters that only read them
// (fasthttp's, which copy names and values).
func Bytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// Names are the names of the fields (by fieldfmt field ID) as a framework
// that normalizes header names (fasthttp, unless exact: Fiber's
// DisableHeaderNormalizing) would write them: the names net/http
// canonicalizes, or the fields' own when exact.
func Names(exact bool) *[fieldfmt.NumFields]string {
	if exact {
		return &fieldfmt.Names
	}
	return &fieldfmt.CanonicalKeys
}
