package nginxuri

import (
	"fmt"
	"strings"
)

// Error says why nginx refuses a request target.
type Error struct {
	// Reason says what is wrong with it.
	Reason string
}

// Error returns the reason, prefixed with the package name.
func (e *Error) Error() string { return "nginxuri: " + e.Reason }

func refuse(format string, args ...any) *Error { return &Error{Reason: fmt.Sprintf(format, args...)} }

// Path returns the path nginx matches its locations on (its $uri) for the
// request target raw (its $request_uri). mergeSlashes is nginx's
// merge_slashes (on by default). The error is an *Error when nginx
// refuses the target.
func Path(raw string, mergeSlashes bool) (string, error) {
	switch {
	case raw == "":
		return "", refuse("empty")
	case raw[0] != '/' && raw[0] != '?':
		return "", refuse("starts with %q, not / (a $request_uri starts with / or ?)", raw[:1])
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] <= ' ' || raw[i] == 0x7f {
			return "", refuse("byte %d is %q (nginx refuses a space or control character in a request line)", i, raw[i])
		}
	}
	end := strings.IndexAny(raw, "?#")
	if end < 0 {
		end = len(raw)
	}
	if end == 0 {
		return "/", nil // the absolute form without a path: "GET http://host?x"
	}
	decoded, err := unescape(raw[:end])
	if err != nil {
		return "", err
	}
	return resolve(decoded, mergeSlashes)
}

// unescape decodes every %XX of p, refusing a broken escape and %00.
func unescape(p string) (string, error) {
	if !strings.Contains(p, "%") {
		return p, nil
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			b.WriteByte(p[i])
			continue
		}
		if i+2 >= len(p) || unhex(p[i+1]) < 0 || unhex(p[i+2]) < 0 {
			return "", refuse("byte %d: a %% not followed by two hex digits", i)
		}
		c := byte(unhex(p[i+1])<<4 | unhex(p[i+2]))
		if c == 0 {
			return "", refuse("byte %d: %%00 (nginx refuses a decoded NUL)", i)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

// unhex is the value of the hex digit c, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// resolve removes the dot segments of the decoded path p (which starts
// with "/"), and merges repeated slashes when merge is set. The last
// segment decides the trailing slash: one is kept after an empty, "." or
// ".." last segment ("/a/", "/a/.", "/a/b/..").
func resolve(p string, merge bool) (string, error) {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	last := len(segs) - 1
	for i, s := range segs {
		switch s {
		case "":
			if i != last && !merge {
				out = append(out, s)
			}
		case ".":
		case "..":
			if len(out) == 0 {
				return "", refuse("a .. segment above the root")
			}
			out = out[:len(out)-1]
		default:
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "/", nil
	}
	path := "/" + strings.Join(out, "/")
	if s := segs[last]; s == "" || s == "." || s == ".." {
		path += "/"
	}
	return path, nil
}
