package keyfunc

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// refSplitForwarded splits a Forwarded line into elements left to right, the
// way RFC 9110 reads a list: commas separate elements except inside quoted
// strings, where a backslash escapes the next byte. ok is false for an
// unterminated quoted string. plain reports that no backslash appears outside
// a quoted string (such a line is invalid anyway, and the right-to-left split
// may reject it earlier).
func refSplitForwarded(s string) (elems []string, ok, plain bool) {
	start, quoted, plain := 0, false, true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '\\':
			plain = false
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			elems = append(elems, s[start:i])
			start = i + 1
		}
	}
	if quoted {
		return nil, false, plain
	}
	return append(elems, s[start:]), true, plain
}

// splitRight splits s with lastElement, returning the elements in order. On
// failure it also returns the elements found before it, rightmost first.
func splitRight(s string, budget int) (elems []string, ok bool, partial []string) {
	var rev []string
	end := len(s)
	for end >= 0 {
		start, ok := lastElement(s[:end], budget)
		if !ok {
			return nil, false, rev
		}
		rev = append(rev, s[start:end])
		end = start - 1
	}
	elems = make([]string, len(rev))
	for i, e := range rev {
		elems[len(rev)-1-i] = e
	}
	return elems, true, rev
}

func TestLastElement(t *testing.T) {
	cases := []struct {
		in   string
		want []string // nil: the split fails
	}{
		{``, []string{``}},
		{`for=a`, []string{`for=a`}},
		{`for=a, for=b`, []string{`for=a`, ` for=b`}},
		{`for="a,b", for=c`, []string{`for="a,b"`, ` for=c`}},
		{`x="\"", y=1`, []string{`x="\""`, ` y=1`}},
		{`x="\\", y=1`, []string{`x="\\"`, ` y=1`}},
		{`x="\\\",", y=1`, []string{`x="\\\","`, ` y=1`}},
		{`x="a`, nil},
		{`x=a"`, nil},
		{`x=a\"`, nil},
		{`,`, []string{``, ``}},
	}
	for _, tc := range cases {
		got, ok, _ := splitRight(tc.in, MaxHeaderBytes)
		if tc.want == nil {
			require.False(t, ok, "%q split as %q", tc.in, got)
			continue
		}
		require.True(t, ok, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

// FuzzForwardedSplit checks that splitting a Forwarded line from the right
// gives exactly the elements a left-to-right parser finds, for every line
// that such a parser accepts, and that it never panics or reads past its
// budget on any line.
func FuzzForwardedSplit(f *testing.F) {
	for _, s := range []string{
		`for=192.0.2.60;proto=http;by=203.0.113.43`,
		`for=192.0.2.43, for=198.51.100.17`,
		`For="[2001:db8:cafe::17]:4711"`,
		`for="_gazonk", for=unknown`,
		`for="a\"b,c\\", host="x,y"`,
		`x="\\\"\\", ,, "`,
		`a\"b"`,
	} {
		f.Add(s, uint16(MaxHeaderBytes))
	}
	f.Fuzz(func(t *testing.T, s string, budget uint16) {
		if b := int(budget); b > 0 {
			start, ok := lastElement(s, b)
			if ok && (start < 0 || start > len(s) || len(s)-start > b || (start > 0 && s[start-1] != ',')) {
				t.Fatalf("lastElement(%q, %d) = %d", s, b, start)
			}
		}
		ref, ok, plain := refSplitForwarded(s)
		got, gotOK, fromRight := splitRight(s, len(s)+1)
		if ok && plain {
			if !gotOK {
				t.Fatalf("%q: right-to-left split failed; reference %q", s, ref)
			}
			require.Equal(t, ref, got, s)
		}
		// The walker over the same line, within its bounds, yields the nodes
		// of those elements, right to left, as far as they split.
		w := newWalker([]string{s}, true)
		left := MaxHeaderBytes
		for i := 0; ; i++ {
			kind, addr, done := w.next()
			if done || kind == nodeInvalid && i >= len(fromRight) {
				break
			}
			if i >= len(fromRight) {
				t.Fatalf("%q: walker entry %d is beyond the split %q", s, i, fromRight)
			}
			wantKind, wantAddr := parseElement(fromRight[i])
			need := len(fromRight[i]) + 1 // with its comma
			if i == len(fromRight)-1 && gotOK {
				need-- // the leftmost element has none
			}
			if i >= MaxHops || need > left {
				wantKind, wantAddr = nodeInvalid, netip.Addr{}
			}
			left -= len(fromRight[i]) + 1
			if kind != wantKind || addr != wantAddr {
				t.Fatalf("%q: walker entry %d = %v %v, element %q = %v %v", s, i, kind, addr, fromRight[i], wantKind, wantAddr)
			}
			if kind == nodeInvalid {
				break
			}
		}
		for _, e := range got {
			kind, addr := parseElement(e)
			if kind == nodeAddr && (!addr.IsValid() || addr.Zone() != "" || addr.Is4In6()) {
				t.Fatalf("%q: element %q gave %v", s, e, addr)
			}
		}
	})
}

// refParseAddrPort is the reference for parseAddrPort(s, false), built on
// the standard library's own parsers.
func refParseAddrPort(s string) (netip.Addr, bool) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if b, err := netip.ParseAddr(s); err == nil {
		a = b
	} else if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		b, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !b.Is6() {
			return netip.Addr{}, false
		}
		a = b
	} else {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// FuzzParseAddrPort compares parseAddrPort with the standard library, and
// checks RFC 7239 node parsing never panics and agrees on plain addresses.
func FuzzParseAddrPort(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1", "192.0.2.1:80", "[2001:db8::1]:443", "[2001:db8::1]", "2001:db8::1",
		"[fe80::1%eth0]:80", "fe80::1%eth0", "::ffff:192.0.2.1", "[::ffff:192.0.2.1]:1",
		"[192.0.2.1]:80", "192.0.2.1:", "192.0.2.1:65536", "192.0.2.1:000080", "@", "",
		"unknown", "_hidden:_port", "192.0.2.1:_p",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseAddrPort(s, false)
		want, wantOK := refParseAddrPort(s)
		if ok != wantOK || got != want {
			t.Fatalf("parseAddrPort(%q) = %v %v, reference %v %v", s, got, ok, want, wantOK)
		}
		kind, addr := parseForNode(s)
		switch kind {
		case nodeAddr:
			if !addr.IsValid() || addr.Zone() != "" || addr.Is4In6() {
				t.Fatalf("parseForNode(%q) = %v", s, addr)
			}
			if ok && addr != got {
				t.Fatalf("parseForNode(%q) = %v, parseAddrPort %v", s, addr, got)
			}
		case nodeOpaque:
			if ok {
				t.Fatalf("parseForNode(%q) is opaque but the address parses as %v", s, got)
			}
		}
		if ok && kind != nodeAddr {
			t.Fatalf("parseForNode(%q) = %v, parseAddrPort %v", s, kind, got)
		}
	})
}
