// Package rawtext finds text that is not Unicode in the raw bytes of a
// request, before a decoder replaces it: encoding/json turns every invalid
// UTF-8 byte and every lone surrogate escape (\ud800) of a string into
// U+FFFD, so a value checked after decoding always looks valid, and two
// different byte strings decode to one. The front doors of the admin plane
// (and the HTTP check API's JSON) check their input here first and refuse
// it naming the field: nothing invalid is decoded, let alone written.
package rawtext

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
)

// Each function returns where text that is not valid UTF-8 was found, and
// why, as a *core.FieldError: its Field names a JSON member ("name",
// "rules[3].name"), "body" for bytes outside any string, a query parameter
// or form field, a path wildcard ("id"); its Message what is wrong ("not
// valid UTF-8", ...).

// The reasons.
const (
	notUTF8  = "not valid UTF-8"
	loneSurr = "holds an unpaired surrogate escape (\\uD800 to \\uDFFF), not a Unicode character"
)

// JSON finds the first string of body (a member's value or name) whose
// raw bytes are not valid UTF-8 or which escapes an unpaired surrogate.
// Members are named by their path from root ("" for an object body:
// "name"; "rules" for an array of objects: "rules[3].name"); an invalid
// member name is reported at its object. Bytes outside any string, or a
// body that is not JSON past the invalid text, are the field "body" (or
// root). It returns nil when every string is valid; a body that is not
// JSON but holds only valid text is left to the decoder to refuse.
func JSON(body []byte, root string) *core.FieldError {
	if utf8.Valid(body) && !mayEscapeSurrogate(body) {
		return nil
	}
	s := &scanner{b: body}
	s.space()
	inv, ok := s.value(root)
	if inv != nil {
		return inv
	}
	if !ok || !utf8.Valid(body) {
		return &core.FieldError{Field: orBody(root), Message: notUTF8}
	}
	return nil
}

// mayEscapeSurrogate reports whether body has \u followed by d or D, the
// start of an escape that may be a surrogate's.
func mayEscapeSurrogate(body []byte) bool {
	for i := bytes.Index(body, []byte(`\u`)); i >= 0; {
		if i+2 < len(body) && (body[i+2] == 'd' || body[i+2] == 'D') {
			return true
		}
		j := bytes.Index(body[i+2:], []byte(`\u`))
		if j < 0 {
			break
		}
		i += 2 + j
	}
	return false
}

func orBody(root string) string {
	if root == "" {
		return "body"
	}
	return root
}

// scanner walks JSON text: only its structure and its strings.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) && strings.IndexByte(" \t\r\n", s.b[s.i]) >= 0 {
		s.i++
	}
}

// value reads one value at path; ok is false when the text is not JSON.
func (s *scanner) value(path string) (inv *core.FieldError, ok bool) {
	if s.i >= len(s.b) {
		return nil, false
	}
	switch s.b[s.i] {
	case '{':
		return s.object(path)
	case '[':
		return s.array(path)
	case '"':
		_, bad, ok := s.str()
		if bad != "" {
			return &core.FieldError{Field: orBody(path), Message: bad}, true
		}
		return nil, ok
	}
	for s.i < len(s.b) && strings.IndexByte(",]} \t\r\n", s.b[s.i]) < 0 {
		s.i++
	}
	return nil, true
}

// object reads an object at path.
func (s *scanner) object(path string) (*core.FieldError, bool) {
	s.i++ // {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil, true
	}
	for {
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return nil, false
		}
		start := s.i
		name, bad, ok := s.str()
		if bad != "" {
			return &core.FieldError{Field: orBody(path), Message: fmt.Sprintf("member name %s %s", strconv.Quote(string(s.b[start+1:s.i-1])), bad)}, true
		}
		if !ok {
			return nil, false
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return nil, false
		}
		s.i++
		s.space()
		member := name
		if path != "" {
			member = path + "." + name
		}
		if inv, ok := s.value(member); inv != nil || !ok {
			return inv, ok
		}
		s.space()
		if s.i >= len(s.b) {
			return nil, false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil, true
		default:
			return nil, false
		}
	}
}

// array reads an array at path, its elements named path[i].
func (s *scanner) array(path string) (*core.FieldError, bool) {
	s.i++ // [
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil, true
	}
	for k := 0; ; k++ {
		s.space()
		if inv, ok := s.value(fmt.Sprintf("%s[%d]", path, k)); inv != nil || !ok {
			return inv, ok
		}
		s.space()
		if s.i >= len(s.b) {
			return nil, false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil, true
		default:
			return nil, false
		}
	}
}

// str reads a string: its text as a member name would be named (escapes
// other than \" and \\ kept as they are, for naming only), and bad, the
// reason it is not Unicode ("" if it is).
func (s *scanner) str() (text, bad string, ok bool) {
	s.i++ // "
	start := s.i
	var name strings.Builder
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if bad == "" && !utf8.Valid(raw) {
				bad = notUTF8
			}
			return name.String(), bad, true
		case c == '\\' && s.i+1 < len(s.b):
			if s.b[s.i+1] == 'u' {
				n, r, ok := s.escape(s.i)
				if !ok && bad == "" {
					bad = loneSurr
				}
				name.WriteString(r)
				s.i += n
				continue
			}
			if e := s.b[s.i+1]; e == '"' || e == '\\' || e == '/' {
				name.WriteByte(e)
			} else {
				name.Write(s.b[s.i : s.i+2])
			}
			s.i += 2
		default:
			name.WriteByte(c)
			s.i++
		}
	}
	return "", "", false
}

// escape reads the \u escape at i (and the low half of a surrogate pair
// after it): its length, its text and whether it is a Unicode character.
func (s *scanner) escape(i int) (n int, text string, ok bool) {
	hi, good := hex4(s.b, i)
	switch {
	case !good:
		return 2, `\u`, true // not an escape the decoder takes: its syntax error
	case hi < 0xd800 || hi > 0xdfff:
		return 6, string(rune(hi)), true
	case hi >= 0xdc00:
		return 6, string(s.b[i : i+6]), false
	}
	if lo, good := hex4(s.b, i+6); good && lo >= 0xdc00 && lo <= 0xdfff {
		return 12, string(rune(0x10000 + (hi-0xd800)<<10 + (lo - 0xdc00))), true
	}
	return 6, string(s.b[i : i+6]), false
}

// hex4 reads the four hex digits of a \u escape at i.
func hex4(b []byte, i int) (int, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
	return int(v), err == nil
}

// Values finds the first name or value of v (a query or a form, in name
// order) that is not valid UTF-8: a value is named by its parameter, an
// invalid name is the field what ("query", "form").
func Values(v url.Values, what string) *core.FieldError {
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range v {
			if !yield(k) {
				return
			}
		}
	}) {
		if !utf8.ValidString(k) {
			return &core.FieldError{Field: what, Message: fmt.Sprintf("parameter name %s is %s", strconv.Quote(k), notUTF8)}
		}
		for _, x := range v[k] {
			if !utf8.ValidString(x) {
				return &core.FieldError{Field: k, Message: notUTF8}
			}
		}
	}
	return nil
}

// Query is Values of r's query string, when it parses (a malformed one is
// left to the handler to refuse).
func Query(r *http.Request) *core.FieldError {
	if r.URL.RawQuery == "" {
		return nil
	}
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil
	}
	return Values(v, "query")
}

// PathValues finds the first wildcard of the pattern that routed r
// (r.Pattern, "/rules/{id}") whose value, percent-decoded, is not valid
// UTF-8, named by the wildcard ("id"). Outside any wildcard, a decoded
// path that is not valid UTF-8 is the field "path".
func PathValues(r *http.Request) *core.FieldError {
	if utf8.ValidString(r.URL.Path) {
		return nil
	}
	p := r.Pattern
	for {
		open := strings.IndexByte(p, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(p[open:], '}')
		if end < 0 {
			break
		}
		name := strings.TrimSuffix(p[open+1:open+end], "...")
		p = p[open+end+1:]
		if name == "$" {
			continue
		}
		if !utf8.ValidString(r.PathValue(name)) {
			return &core.FieldError{Field: name, Message: notUTF8}
		}
	}
	return &core.FieldError{Field: "path", Message: notUTF8}
}
