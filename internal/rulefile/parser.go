package rulefile

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// A Field is a key a mapping may hold. Old, when set, is the name the field
// had before the one vocabulary: still read, with the same meaning, and
// listed in the file's deprecation notice.
type Field struct{ Name, Old string }

// Plain returns the fields of names, none of them renamed.
func Plain(names ...string) []Field {
	out := make([]Field, len(names))
	for i, n := range names {
		out[i] = Field{Name: n}
	}
	return out
}

// Parser walks the document of one file, collecting every error (each
// naming file, line and field) and the old names the file uses. It is not
// safe for concurrent use.
type Parser struct {
	label, file string
	errs        []error
	old         map[string]*oldUse
}

// oldUse is where a file spells a field by its old name.
type oldUse struct {
	name      string // the field's name now
	line, col int    // the first use
	more      int    // how many after it
}

// NewParser returns the parser of the file name, its errors under label.
func NewParser(label, name string) *Parser { return &Parser{label: label, file: name} }

// File is the name of the file read.
func (p *Parser) File() string { return p.file }

// Fail reports an error of field at n's line (no line when n is nil).
func (p *Parser) Fail(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, Errorf(p.label, p.file, line, field, format, args...))
}

// Failures is the number of errors reported so far: a reader compares it
// before and after a part to tell whether that part was valid.
func (p *Parser) Failures() int { return len(p.errs) }

// Err joins every error reported, nil if none.
func (p *Parser) Err() error { return errors.Join(p.errs...) }

// Notice is the file's deprecation notice: the old names it uses, each with
// its first line and its name now; "" when it uses none.
func (p *Parser) Notice() string {
	if len(p.old) == 0 {
		return ""
	}
	olds := make([]string, 0, len(p.old))
	for o := range p.old {
		olds = append(olds, o)
	}
	slices.SortFunc(olds, func(a, b string) int {
		if d := p.old[a].line - p.old[b].line; d != 0 {
			return d
		}
		return p.old[a].col - p.old[b].col
	})
	parts := make([]string, len(olds))
	for i, o := range olds {
		u := p.old[o]
		where := fmt.Sprintf("line %d", u.line)
		if u.more > 0 {
			where += fmt.Sprintf(" and %d more", u.more)
		}
		parts[i] = fmt.Sprintf("%s (%s) is now %s", o, where, u.name)
	}
	return fmt.Sprintf("%s %s: deprecated field names, still read with the same meaning: %s", p.label, p.file, strings.Join(parts, ", "))
}

// Mapping holds the values of a mapping by field name, whichever of its
// names the file gives it under.
type Mapping struct {
	// Node is the mapping.
	Node *yaml.Node
	path string
	vals map[string]entry
}

type entry struct {
	key, val *yaml.Node
}

// Get returns the value of the field name, nil when absent.
func (m Mapping) Get(name string) *yaml.Node { return m.vals[name].val }

// Written returns the key the file gives the field name under: name, its
// old name, or "" when absent.
func (m Mapping) Written(name string) string {
	if e, ok := m.vals[name]; ok {
		return e.key.Value
	}
	return ""
}

// Path returns the path of the field name as the file writes it (under its
// old name when the file gives that), or as it would be written now.
func (m Mapping) Path(name string) string {
	if e, ok := m.vals[name]; ok {
		return Join(m.path, e.key.Value)
	}
	return Join(m.path, name)
}

// Join is the path of the field name under path ("" is the top level).
func Join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Fields reads the mapping n at path: each key one of known, under its name
// or its old name, given once. It reports an unknown key, a key given
// twice and a field given under both its names, and records each old name
// for the deprecation notice. ok is false when n is not a mapping.
func (p *Parser) Fields(n *yaml.Node, path string, known []Field) (m Mapping, ok bool) {
	if n.Kind != yaml.MappingNode {
		field := path
		if field == "" {
			field = "file"
		}
		p.Fail(n, field, "must be a mapping")
		return Mapping{}, false
	}
	m = Mapping{Node: n, path: path, vals: make(map[string]entry, len(n.Content)/2)}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i]
		f, found := lookup(known, key.Value)
		if !found {
			names := make([]string, len(known))
			for j, k := range known {
				names[j] = k.Name
			}
			p.Fail(key, Join(path, key.Value), "unknown field (known: %s)", strings.Join(names, ", "))
			continue
		}
		if prev, dup := m.vals[f.Name]; dup {
			if prev.key.Value == key.Value {
				p.Fail(key, Join(path, key.Value), "given twice")
			} else {
				p.Fail(key, Join(path, key.Value), "%s and %s (line %d) are one field, %s its deprecated name: give it once, as %s",
					key.Value, prev.key.Value, prev.key.Line, f.Old, f.Name)
			}
			continue
		}
		if key.Value != f.Name {
			p.useOld(key.Value, f.Name, key)
		}
		m.vals[f.Name] = entry{key, n.Content[i+1]}
	}
	return m, true
}

func lookup(known []Field, key string) (Field, bool) {
	for _, f := range known {
		if key == f.Name || f.Old != "" && key == f.Old {
			return f, true
		}
	}
	return Field{}, false
}

// useOld records a use of an old spelling, old, of what is now spelled
// now, at n.
func (p *Parser) useOld(old, now string, n *yaml.Node) {
	if p.old == nil {
		p.old = map[string]*oldUse{}
	}
	if u := p.old[old]; u != nil {
		u.more++
		return
	}
	p.old[old] = &oldUse{name: now, line: n.Line, col: n.Column}
}

// IsNull reports whether v is YAML's null (a key with nothing after it).
func IsNull(v *yaml.Node) bool { return v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" }

// Str reads a string.
func (p *Parser) Str(v *yaml.Node, path string) (string, bool) {
	if v.Kind != yaml.ScalarNode || IsNull(v) {
		p.Fail(v, path, "must be a string")
		return "", false
	}
	return v.Value, true
}

// Bool reads true or false.
func (p *Parser) Bool(v *yaml.Node, path string) (b, ok bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		p.Fail(v, path, "must be true or false, got %q", v.Value)
		return false, false
	}
	return b, true
}

// LegacyBool reads true or false, or one of YAML 1.1's words for them
// (yes, no, on, off, y, n, capitalized or in upper case), which go-yaml
// reads into a Go bool and the library's file has therefore always taken.
// A word is read with that meaning and listed in the deprecation notice.
func (p *Parser) LegacyBool(v *yaml.Node, path string) (b, ok bool) {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
		switch strings.ToLower(v.Value) {
		case "y", "yes", "on", "n", "no", "off":
			if v.Decode(&b) == nil {
				field := path[strings.LastIndexByte(path, '.')+1:]
				p.useOld(field+": "+v.Value, fmt.Sprintf("%s: %t", field, b), v)
				return b, true
			}
		}
	}
	return p.Bool(v, path)
}

// Whole reads a whole number >= lo. YAML's decoder truncates a fraction
// ("1.5" would read as 1) and takes a quoted number in places; only an
// integer, or a number with no fractional part ("5.0", "1e3", as JSON
// generators write them), is taken here.
func (p *Parser) Whole(v *yaml.Node, path string, lo int64) (int64, bool) {
	var n int64
	ok := false
	if v.Kind == yaml.ScalarNode {
		switch v.ShortTag() {
		case "!!int":
			ok = v.Decode(&n) == nil
		case "!!float":
			var f float64
			if v.Decode(&f) == nil && f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
				n, ok = int64(f), true
			}
		}
	}
	if !ok || n < lo {
		p.Fail(v, path, "must be a whole number >= %d, got %q", lo, v.Value)
		return 0, false
	}
	return n, true
}

// Duration reads a positive Go duration; examples shows the field's
// usual values ("1s, 1m or 1h").
func (p *Parser) Duration(v *yaml.Node, path, examples string) (time.Duration, bool) {
	d, err := time.ParseDuration(v.Value)
	if err != nil || d <= 0 || v.Kind != yaml.ScalarNode {
		p.Fail(v, path, "must be a positive duration such as %s, got %q", examples, v.Value)
		return 0, false
	}
	return d, true
}

// maxSecondsText bounds the text of a fractional number of seconds, so
// that its exact value is cheap to compute whatever its exponent.
const maxSecondsText = 64

// Seconds reads a positive number of seconds, whole (60) or with a
// fraction down to the microsecond (0.5, 1e-3), into a duration. The
// number is read exactly: a value between two microseconds is an error,
// never rounded.
func (p *Parser) Seconds(v *yaml.Node, path string) (time.Duration, bool) {
	bad := func(why string) (time.Duration, bool) {
		p.Fail(v, path, "%s, got %q", why, v.Value)
		return 0, false
	}
	const usage = "must be a positive number of seconds such as 1, 60 or 0.5"
	if v.Kind != yaml.ScalarNode {
		return bad(usage)
	}
	var secs big.Rat
	switch v.ShortTag() {
	case "!!int":
		var n int64
		if v.Decode(&n) != nil {
			return bad(usage)
		}
		secs.SetInt64(n)
	case "!!float":
		if len(v.Value) > maxSecondsText {
			return bad(usage)
		}
		if _, ok := secs.SetString(v.Value); !ok {
			return bad(usage)
		}
	default:
		return bad(usage)
	}
	if secs.Sign() <= 0 {
		return bad(usage)
	}
	us := new(big.Rat).Mul(&secs, big.NewRat(1_000_000, 1))
	if !us.IsInt() {
		return bad("must be a whole number of microseconds")
	}
	if !us.Num().IsInt64() || us.Num().Int64() > math.MaxInt64/int64(time.Microsecond) {
		return bad(fmt.Sprintf("must be at most %d seconds", math.MaxInt64/int64(time.Second)))
	}
	return time.Duration(us.Num().Int64()) * time.Microsecond, true
}
