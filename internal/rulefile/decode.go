package rulefile

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Decode parses data, the content of the file name, and returns its
// document. A syntax error names the line it is on.
func (o *Options) Decode(name string, data []byte) (*yaml.Node, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		line, msg := syntaxError(data, err)
		return nil, Errorf(o.Label, name, line, "", "not valid YAML: %s", msg)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%s %s: empty file", o.Label, name)
	}
	return root.Content[0], nil
}

// yamlLine is the position go-yaml puts in its syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)

// syntaxError returns the line of YAML's syntax error err in data and its
// message without go-yaml's own position. That position is the line before
// the collection the error is in, not the error's ("line 1" for a list
// item indented one space too few on line 80 of a list begun on line 2),
// but the error is never before it. The error's line is the first line
// that, read with all lines before it, gives the same error: a file cut
// before it parses (its open blocks end with the cut) or fails otherwise.
// A binary search finds it in as many parses as the file has lines' bits.
func syntaxError(data []byte, err error) (int, string) {
	full := err.Error()
	m := yamlLine.FindStringSubmatch(full)
	if m == nil {
		return 0, full
	}
	msg := full[len(m[0]):]
	ends := lineEnds(data)
	lo := 1
	if m[1] != "" {
		if n, err := strconv.Atoi(m[1]); err == nil && n >= 1 && n <= len(ends) {
			lo = n
		}
	}
	// The whole file (the last i) gives it: Search returns at most that.
	k := lo + sort.Search(len(ends)-lo+1, func(i int) bool {
		var n yaml.Node
		err := yaml.Unmarshal(data[:ends[lo+i-1]], &n)
		return err != nil && err.Error() == full
	})
	return k, msg
}

// lineEnds returns the offset past each line of data (its newline
// included); the last is len(data).
func lineEnds(data []byte) []int {
	var ends []int
	for off := 0; ; {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			if off < len(data) || len(ends) == 0 {
				ends = append(ends, len(data))
			}
			return ends
		}
		off += i + 1
		ends = append(ends, off)
	}
}

// Errorf is the error of a field at a line of a file: "LABEL FILE:LINE:
// FIELD: MESSAGE", without the line when it is 0 and without the field
// when it is "". Every error about a field of a file is made here.
func Errorf(label, file string, line int, field, format string, args ...any) error {
	var b strings.Builder
	b.WriteString(label)
	b.WriteByte(' ')
	b.WriteString(file)
	if line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(line))
	}
	b.WriteString(": ")
	if field != "" {
		b.WriteString(field)
		b.WriteString(": ")
	}
	return fmt.Errorf("%s%s", b.String(), fmt.Sprintf(format, args...))
}
