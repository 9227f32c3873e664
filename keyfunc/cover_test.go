package keyfunc_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/keyfunc"
)

// TestTrustEverythingIsAnError: a trusted list that covers a whole address
// family makes every peer a proxy, so any client picks its own key with a
// forwarding header. Such a list is an error naming the option.
func TestTrustEverythingIsAnError(t *testing.T) {
	pfx := netip.MustParsePrefix
	cases := []struct {
		name string
		opts []keyfunc.IPOption
		want string // "" means valid
	}{
		{"v4 everything", []keyfunc.IPOption{keyfunc.TrustProxies("0.0.0.0/0")}, "TrustProxies"},
		{"v6 everything", []keyfunc.IPOption{keyfunc.TrustProxies("::/0")}, "TrustProxies"},
		{"mapped everything", []keyfunc.IPOption{keyfunc.TrustProxies("::ffff:0:0/96")}, "IPv4"},
		{"v4 halves", []keyfunc.IPOption{keyfunc.TrustProxies("0.0.0.0/1", "128.0.0.0/1")}, "every IPv4 address"},
		{"v4 halves over two calls", []keyfunc.IPOption{keyfunc.TrustProxies("128.0.0.0/1"), keyfunc.TrustProxies("0.0.0.0/1")}, "TrustProxies"},
		{"v4 mixed options", []keyfunc.IPOption{keyfunc.TrustProxies("0.0.0.0/1"), keyfunc.TrustPrefixes(pfx("128.0.0.0/1"))}, "TrustProxies, TrustPrefixes"},
		{"v4 quarters, overlapping", []keyfunc.IPOption{keyfunc.TrustProxies("192.0.0.0/2", "0.0.0.0/2", "10.0.0.0/8", "64.0.0.0/2", "128.0.0.0/2")}, "IPv4"},
		{"v4 with host bits", []keyfunc.IPOption{keyfunc.TrustProxies("1.2.3.4/1", "200.1.1.1/1")}, "IPv4"},
		{"v4 as mapped halves", []keyfunc.IPOption{keyfunc.TrustProxies("::ffff:0.0.0.0/97", "128.0.0.0/1")}, "IPv4"},
		{"v6 halves", []keyfunc.IPOption{keyfunc.TrustPrefixes(pfx("::/1"), pfx("8000::/1"))}, "every IPv6 address"},
		{"v6 all but the mapped range", []keyfunc.IPOption{keyfunc.TrustPrefixes(siblingsOnPath(netip.MustParsePrefix("::ffff:0:0/96"))...)}, "IPv6"},
		{"v6 all but one address", []keyfunc.IPOption{keyfunc.TrustPrefixes(siblingsOnPath(netip.MustParsePrefix("2001:db8::1/128"))...)}, ""},
		{"v4 all but one /24", []keyfunc.IPOption{keyfunc.TrustPrefixes(siblingsOnPath(netip.MustParsePrefix("203.0.113.0/24"))...)}, ""},
		{"both families named", []keyfunc.IPOption{keyfunc.TrustProxies("0.0.0.0/0", "::/0")}, "IPv6"},

		{"v4 one half", []keyfunc.IPOption{keyfunc.TrustProxies("0.0.0.0/1")}, ""},
		{"v4 all but one address", []keyfunc.IPOption{keyfunc.TrustProxies("0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3", "224.0.0.0/4",
			"240.0.0.0/5", "248.0.0.0/6", "252.0.0.0/7", "254.0.0.0/8", "255.0.0.0/9", "255.128.0.0/10", "255.192.0.0/11",
			"255.224.0.0/12", "255.240.0.0/13", "255.248.0.0/14", "255.252.0.0/15", "255.254.0.0/16", "255.255.0.0/17",
			"255.255.128.0/18", "255.255.192.0/19", "255.255.224.0/20", "255.255.240.0/21", "255.255.248.0/22",
			"255.255.252.0/23", "255.255.254.0/24", "255.255.255.0/25", "255.255.255.128/26", "255.255.255.192/27",
			"255.255.255.224/28", "255.255.255.240/29", "255.255.255.248/30", "255.255.255.252/31", "255.255.255.254")}, ""},
		{"v4 everything but 0.0.0.0", []keyfunc.IPOption{keyfunc.TrustProxies("128.0.0.0/1", "64.0.0.0/2", "32.0.0.0/3", "16.0.0.0/4",
			"8.0.0.0/5", "4.0.0.0/6", "2.0.0.0/7", "1.0.0.0/8", "0.128.0.0/9", "0.64.0.0/10", "0.32.0.0/11", "0.16.0.0/12",
			"0.8.0.0/13", "0.4.0.0/14", "0.2.0.0/15", "0.1.0.0/16", "0.0.128.0/17", "0.0.64.0/18", "0.0.32.0/19",
			"0.0.16.0/20", "0.0.8.0/21", "0.0.4.0/22", "0.0.2.0/23", "0.0.1.0/24", "0.0.0.128/25", "0.0.0.64/26",
			"0.0.0.32/27", "0.0.0.16/28", "0.0.0.8/29", "0.0.0.4/30", "0.0.0.2/31", "0.0.0.1")}, ""},
		{"v6 halves of v4 and v6 quarters", []keyfunc.IPOption{keyfunc.TrustProxies("0.0.0.0/1", "::/1", "c000::/2")}, ""},
		{"the documentation networks", []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := keyfunc.NewIPExtractor(tc.opts...)
			if tc.want == "" {
				require.NoError(t, err)
				require.NotNil(t, e)
				return
			}
			require.Error(t, err)
			require.Nil(t, e)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "cover every")
		})
	}
}

// TestTrustCoverageProperty: for random sets of prefixes, NewIPExtractor
// fails iff their union covers the whole IPv4 or the whole IPv6 space, as an
// independent recursive oracle computes it.
func TestTrustCoverageProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 0x5eed))
	mapped := netip.MustParsePrefix("::ffff:0:0/96")
	var covering, total int
	for range 4000 {
		var ps []netip.Prefix
		switch rng.IntN(3) {
		case 0: // random prefixes, short enough to cover sometimes
			for range 1 + rng.IntN(8) {
				ps = append(ps, randomPrefix(rng, rng.IntN(2) == 0, rng.IntN(5)))
			}
		default: // a partition of a family, perhaps with one piece dropped or
			// cut shorter, plus noise
			v4 := rng.IntN(2) == 0
			root := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			if !v4 {
				root = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
			ps = partition(rng, root, 0)
			if rng.IntN(2) == 0 && len(ps) > 1 {
				i := rng.IntN(len(ps))
				if rng.IntN(2) == 0 {
					ps = append(ps[:i], ps[i+1:]...)
				} else if p := ps[i]; p.Bits() < p.Addr().BitLen() {
					ps[i] = netip.PrefixFrom(p.Addr(), p.Bits()+1)
				}
			}
			for range rng.IntN(3) {
				ps = append(ps, randomPrefix(rng, rng.IntN(2) == 0, 1+rng.IntN(40)))
			}
		}
		rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })

		// The oracle folds IPv4-mapped prefixes to IPv4 as the extractor
		// documents, and counts the mapped range as covered in IPv6.
		var v4, v6 []netip.Prefix
		for _, p := range ps {
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			if p.Addr().Is4() {
				v4 = append(v4, p)
			} else {
				v6 = append(v6, p)
			}
		}
		want := oracleCovers(netip.PrefixFrom(netip.IPv4Unspecified(), 0), v4, netip.Prefix{}) ||
			oracleCovers(netip.PrefixFrom(netip.IPv6Unspecified(), 0), v6, mapped)
		_, err := keyfunc.NewIPExtractor(keyfunc.TrustPrefixes(ps...))
		require.Equal(t, want, err != nil, "prefixes %v: err %v", ps, err)
		total++
		if want {
			covering++
		}
	}
	// The generator must exercise both answers often.
	require.Greater(t, covering, total/5)
	require.Less(t, covering, total*4/5)
}

// randomPrefix returns a masked prefix of the family with bits bits (at most
// the family's length), never one that would fold to IPv4 with bits < 96.
func randomPrefix(rng *rand.Rand, v4 bool, bits int) netip.Prefix {
	if v4 {
		var b [4]byte
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return netip.PrefixFrom(netip.AddrFrom4(b), min(bits, 32)).Masked()
	}
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), min(bits, 128)).Masked()
}

// partition splits p at random into prefixes that cover it exactly.
func partition(rng *rand.Rand, p netip.Prefix, depth int) []netip.Prefix {
	if depth > 0 && rng.IntN(3) == 0 || depth >= 12 {
		return []netip.Prefix{p}
	}
	lo, hi := halves(p)
	return append(partition(rng, lo, depth+1), partition(rng, hi, depth+1)...)
}

// halves returns the two prefixes one bit longer than p.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	b := p.Addr().AsSlice()
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	b[p.Bits()/8] |= 0x80 >> (p.Bits() % 8)
	a, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(a, p.Bits()+1)
}

// oracleCovers reports whether region is covered by the union of ps (and
// free, if valid): some prefix contains it, or both its halves are covered.
func oracleCovers(region netip.Prefix, ps []netip.Prefix, free netip.Prefix) bool {
	contains := func(outer netip.Prefix) bool {
		return outer.IsValid() && outer.Bits() <= region.Bits() && outer.Contains(region.Addr())
	}
	if contains(free) {
		return true
	}
	overlaps := free.IsValid() && free.Overlaps(region)
	for _, p := range ps {
		if contains(p) {
			return true
		}
		overlaps = overlaps || p.Overlaps(region)
	}
	if !overlaps || region.Bits() == region.Addr().BitLen() {
		return false
	}
	lo, hi := halves(region)
	return oracleCovers(lo, ps, free) && oracleCovers(hi, ps, free)
}

// siblingsOnPath returns the prefixes that, with target, partition target's
// whole family: the other half at every step from /0 down to target.
func siblingsOnPath(target netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	cur := netip.PrefixFrom(target.Addr(), 0).Masked()
	for cur.Bits() < target.Bits() {
		lo, hi := halves(cur)
		if lo.Contains(target.Addr()) {
			cur, out = lo, append(out, hi)
		} else {
			cur, out = hi, append(out, lo)
		}
	}
	return out
}
