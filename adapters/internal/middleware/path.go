package middleware

import (
	"net/url"
	"path"
	"strings"
)

// RoutedPath returns the path of u as routers that decode each segment
// (Go's ServeMux, chi, Echo) see it: u.Path when the request path has no
// encoded slash or other escape that decoding would merge (the common case,
// without an allocation); otherwise the escaped path with each segment
// decoded but "/" inside a segment kept as "%2F", so that the segments are
// the router's.
func RoutedPath(u *url.URL) string {
	if u.RawPath == "" {
		return u.Path
	}
	esc := u.EscapedPath()
	if !strings.Contains(esc, "%") {
		return esc
	}
	var b strings.Builder
	b.Grow(len(esc))
	for i, seg := range strings.Split(esc, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		dec, err := url.PathUnescape(seg)
		if err != nil {
			b.WriteString(seg)
			continue
		}
		b.WriteString(strings.ReplaceAll(dec, "/", "%2F"))
	}
	return b.String()
}

// CleanPath is path.Clean that keeps a trailing slash, as httprouter's and
// gin's cleanPath do: "//a/./b/" is "/a/b/".
func CleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if cleanAlready(p) {
		return p
	}
	c := path.Clean("/" + p)
	if p[len(p)-1] == '/' && c != "/" {
		c += "/"
	}
	return c
}

// cleanAlready reports whether CleanPath(p) is p, without an allocation.
func cleanAlready(p string) bool {
	if p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); {
		j := strings.IndexByte(p[i+1:], '/')
		var seg string
		if j < 0 {
			seg, i = p[i+1:], len(p)
		} else {
			seg, i = p[i+1:i+1+j], i+1+j
		}
		if seg == "." || seg == ".." || seg == "" && i < len(p) {
			return false
		}
	}
	return true
}

// Conforms reports whether path p is one that the route template matches:
// literal segments equal, ":name" any one non-empty segment, and a segment
// starting with "*" (gin's "*filepath", Echo's "*") any rest. Templates and
// paths are compared segment by segment, case-sensitively.
func Conforms(template, p string) bool {
	for {
		if template == "" || p == "" {
			return template == p
		}
		if template[0] != '/' || p[0] != '/' {
			return false
		}
		template, p = template[1:], p[1:]
		if strings.HasPrefix(template, "*") {
			return true
		}
		ti := strings.IndexByte(template, '/')
		if ti < 0 {
			ti = len(template)
		}
		pi := strings.IndexByte(p, '/')
		if pi < 0 {
			pi = len(p)
		}
		if ts, ps := template[:ti], p[:pi]; strings.HasPrefix(ts, ":") {
			if ps == "" {
				return false
			}
		} else if ts != ps {
			return false
		}
		template, p = template[ti:], p[pi:]
	}
}

// TemplatePath is the path a router that matched route template tmpl
// counts a request as: the first of the candidates (spellings of the
// request path, the router's own first) that the template matches, else
// the template itself, so that a variant of a path that reached a route's
// handlers is counted as that route. With no template (no route matched)
// it is the first candidate, cleaned.
func TemplatePath(tmpl string, candidates ...string) string {
	if tmpl == "" {
		return CleanPath(candidates[0])
	}
	for _, p := range candidates {
		if Conforms(tmpl, p) {
			return p
		}
	}
	return tmpl
}

// FoldPath is p as a router that ignores trailing slashes (trim) and case
// (lower, ASCII only) matches it, as Fiber's does by default: without
// trailing slashes, in lower case. It allocates only to lower a path that
// has upper-case letters.
func FoldPath(p string, trim, lower bool) string {
	for trim && len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	for i := 0; lower && i < len(p); i++ {
		if 'A' <= p[i] && p[i] <= 'Z' {
			b := []byte(p)
			for ; i < len(b); i++ {
				if 'A' <= b[i] && b[i] <= 'Z' {
					b[i] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return p
}

// Or returns route, or path when route is empty: a view's Route when the
// router matched no route template.
func Or(route, path string) string {
	if route != "" {
		return route
	}
	return path
}
