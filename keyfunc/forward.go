package keyfunc

import (
	"net/netip"
	"strings"
)

// Bounds on the work done for one request's forwarding header. Both are
// counted from the right-hand end of the list, which is the end the walk
// starts from; bytes to the left of what the walk needs are never read.
const (
	// MaxHops is the largest number of list entries (X-Forwarded-For
	// addresses or Forwarded elements) examined for one request, and the
	// largest value TrustHops accepts. A walk that would need more fails
	// closed to the transport peer.
	MaxHops = 64
	// MaxHeaderBytes is the largest number of header bytes examined for one
	// request, across all lines of the header. A walk that would need more
	// fails closed to the transport peer.
	MaxHeaderBytes = 8 << 10
)

// nodeKind classifies one entry of a forwarding list.
type nodeKind uint8

const (
	nodeInvalid nodeKind = iota // unparseable, empty, or over a bound: fail closed
	nodeAddr                    // an IP address
	nodeOpaque                  // a well-formed entry without an address: Forwarded "unknown", "_obfuscated", or no for=
)

// walker yields the entries of a list header (X-Forwarded-For or Forwarded)
// from the right, across all of its lines, counting hops and bytes. Lines are
// concatenated in order, as RFC 9110 section 5.3 requires for list headers.
type walker struct {
	lines     []string
	line      int // index of the line being read; -1 when every line is used up
	end       int // lines[line][:end] is still unread; -1 when that line is used up
	budget    int // header bytes that may still be examined
	hops      int // entries returned so far
	forwarded bool
}

func newWalker(lines []string, forwarded bool) walker {
	w := walker{lines: lines, line: len(lines) - 1, end: -1, budget: MaxHeaderBytes, forwarded: forwarded}
	if w.line >= 0 {
		w.end = len(lines[w.line])
	}
	return w
}

// next returns the next entry from the right. done reports that there is
// none left; an entry that breaks a bound is returned as nodeInvalid.
func (w *walker) next() (kind nodeKind, addr netip.Addr, done bool) {
	for w.end < 0 {
		if w.line <= 0 {
			w.line = -1
			return nodeInvalid, netip.Addr{}, true
		}
		w.line--
		w.end = len(w.lines[w.line])
	}
	w.hops++
	if w.hops > MaxHops || w.budget <= 0 {
		return nodeInvalid, netip.Addr{}, false
	}
	s := w.lines[w.line][:w.end]
	var start int
	var ok bool
	if w.forwarded {
		start, ok = lastElement(s, w.budget)
	} else {
		start, ok = lastEntry(s, w.budget)
	}
	if !ok {
		w.budget = 0
		return nodeInvalid, netip.Addr{}, false
	}
	w.budget -= len(s) - start + 1 // the entry and its comma
	w.end = start - 1              // the comma before the entry, or -1
	entry := s[start:]
	if w.forwarded {
		kind, addr = parseElement(entry)
		return kind, addr, false
	}
	addr, ok = parseAddrPort(trimOWS(entry), false)
	if !ok {
		return nodeInvalid, netip.Addr{}, false
	}
	return nodeAddr, addr, false
}

// lastEntry returns where the last comma-separated X-Forwarded-For entry of s
// starts, reading at most budget bytes from the right.
func lastEntry(s string, budget int) (start int, ok bool) {
	lo := max(0, len(s)-budget)
	i := strings.LastIndexByte(s[lo:], ',')
	if i < 0 {
		return 0, lo == 0
	}
	return lo + i + 1, true
}

// lastElement returns where the last forwarded-element of the Forwarded line
// s starts, reading at most budget bytes from the right. Commas inside quoted
// strings do not separate elements. Reading from the right, a '"' preceded by
// an odd number of backslashes is an escaped quote (quoted-pair); by an even
// number, it opens or closes a quoted string. An element written by a proxy is
// therefore split exactly as a left-to-right parser would split it, however
// malformed the client-written text to its left is.
func lastElement(s string, budget int) (start int, ok bool) {
	lo := max(0, len(s)-budget)
	quoted := false
	for i := len(s) - 1; i >= lo; i-- {
		switch s[i] {
		case ',':
			if !quoted {
				return i + 1, true
			}
		case '"':
			j := i - 1
			for j >= lo && s[j] == '\\' {
				j--
			}
			if j < lo && lo > 0 {
				return 0, false // the run of backslashes crosses the budget
			}
			if (i-1-j)%2 == 1 { // escaped quote
				if !quoted {
					return 0, false
				}
				i = j + 1
				continue
			}
			quoted = !quoted
		}
	}
	if lo > 0 || quoted {
		return 0, false
	}
	return 0, true
}

// parseElement parses one RFC 7239 forwarded-element, pairs separated by ';',
// and classifies the node named by its for= parameter. It tolerates optional
// whitespace around pairs and unquoted values that contain ':', '[' or ']'
// (some proxies write for=[2001:db8::1]:80 unquoted), which cannot change the
// meaning of the element. An empty element, a pair without a value, a
// repeated for=, or a for= value that uses a backslash escape is invalid.
func parseElement(e string) (nodeKind, netip.Addr) {
	var forValue string
	seenFor, pairs := false, 0
	i := 0
	for {
		i = skipOWS(e, i)
		if i == len(e) {
			break
		}
		if e[i] == ';' {
			i++
			continue
		}
		name, value, escaped, next, ok := parsePair(e, i)
		if !ok {
			return nodeInvalid, netip.Addr{}
		}
		pairs++
		if strings.EqualFold(name, "for") {
			if seenFor || escaped {
				return nodeInvalid, netip.Addr{}
			}
			seenFor, forValue = true, value
		}
		i = skipOWS(e, next)
		if i < len(e) && e[i] != ';' {
			return nodeInvalid, netip.Addr{}
		}
	}
	switch {
	case pairs == 0:
		return nodeInvalid, netip.Addr{}
	case !seenFor:
		return nodeOpaque, netip.Addr{}
	}
	return parseForNode(forValue)
}

// parsePair parses the pair name=value of an element e at i: a token, '='
// and a quoted string (escaped: it holds a backslash escape) or a token
// that may contain ':', '[' and ']'. next is the index after it; false:
// there is no such pair at i.
func parsePair(e string, i int) (name, value string, escaped bool, next int, ok bool) {
	j := i
	for j < len(e) && isTchar(e[j]) {
		j++
	}
	if j == i || j == len(e) || e[j] != '=' {
		return "", "", false, 0, false
	}
	name = e[i:j]
	j++
	if j < len(e) && e[j] == '"' {
		k := j + 1
		for k < len(e) && e[k] != '"' {
			if e[k] == '\\' {
				escaped = true
				k++
			}
			k++
		}
		if k >= len(e) {
			return "", "", false, 0, false // unterminated quoted string
		}
		return name, e[j+1 : k], escaped, k + 1, true
	}
	k := j
	for k < len(e) && (isTchar(e[k]) || e[k] == ':' || e[k] == '[' || e[k] == ']') {
		k++
	}
	if k == j {
		return "", "", false, 0, false
	}
	return name, e[j:k], false, k, true
}

// parseForNode parses an RFC 7239 node: IPv4, "[" IPv6 "]", "unknown" or an
// obfuscated "_token", each with an optional ":port" (digits or "_token").
func parseForNode(v string) (nodeKind, netip.Addr) {
	if v == "" {
		return nodeInvalid, netip.Addr{}
	}
	if v[0] != '[' {
		name := v
		if i := strings.IndexByte(v, ':'); i >= 0 && strings.IndexByte(v[i+1:], ':') < 0 {
			if !validPort(v[i+1:], true) {
				return nodeInvalid, netip.Addr{}
			}
			name = v[:i]
		}
		if strings.EqualFold(name, "unknown") || validObfuscated(name) {
			return nodeOpaque, netip.Addr{}
		}
	}
	a, ok := parseAddrPort(v, true)
	if !ok {
		return nodeInvalid, netip.Addr{}
	}
	return nodeAddr, a
}

// parseAddrPort parses an IP address optionally followed by a port, as found
// in RemoteAddr and forwarding headers: "192.0.2.1", "192.0.2.1:80",
// "2001:db8::1", "[2001:db8::1]", "[2001:db8::1%eth0]:80". The result has its
// zone removed and an IPv4-mapped IPv6 address folded to IPv4. A port is a
// decimal number up to 65535, or, if obfPort is set, an RFC 7239 obfuscated
// "_token".
func parseAddrPort(s string, obfPort bool) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	host := s
	bracketed := false
	if s[0] == '[' {
		end := strings.LastIndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], obfPort)) {
			return netip.Addr{}, false
		}
		host, bracketed = s[1:end], true
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// One colon: IPv4 with a port. Two or more: a bare IPv6 address,
		// which cannot carry a port without brackets.
		if !validPort(s[i+1:], obfPort) {
			return netip.Addr{}, false
		}
		host = s[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil || (bracketed && !a.Is6()) {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

func validPort(p string, obf bool) bool {
	if obf && len(p) > 0 && p[0] == '_' {
		return validObfuscated(p)
	}
	if len(p) == 0 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		if n = n*10 + int(p[i]-'0'); n > 65535 {
			return false
		}
	}
	return true
}

// validObfuscated reports whether s is an RFC 7239 obfnode or obfport:
// "_" 1*( ALPHA / DIGIT / "." / "_" / "-" ).
func validObfuscated(s string) bool {
	if len(s) < 2 || s[0] != '_' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// isTchar reports whether c is an RFC 9110 token character.
func isTchar(c byte) bool {
	if isAlnum(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

func trimOWS(s string) string {
	i, j := 0, len(s)
	for i < j && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	for j > i && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	return s[i:j]
}
