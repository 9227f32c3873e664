package keyfunc_test

import (
	"testing"

	"github.com/sluicehq/sluice/keyfunc"
)

func BenchmarkIP(b *testing.B) {
	cases := []struct {
		name string
		opts []keyfunc.IPOption
		r    *keyfunc.Static
		want string
	}{
		{"peer-only/v4", nil, &keyfunc.Static{Remote: "203.0.113.7:5555"}, "203.0.113.7"},
		{"peer-only/v6", nil, &keyfunc.Static{Remote: "[2001:db8:1:2:3:4:5:6]:5555"}, "2001:db8:1:2::/64"},
		{"xff-trusted-proxy", []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8", "172.16.0.0/12")},
			&keyfunc.Static{Remote: "10.0.0.1:4000", Headers: map[string][]string{"X-Forwarded-For": {"192.0.2.1, 198.51.100.9, 10.0.0.2"}}}, "198.51.100.9"},
		{"xff-hops", []keyfunc.IPOption{keyfunc.TrustHops(2)},
			&keyfunc.Static{Remote: "10.0.0.1:4000", Headers: map[string][]string{"X-Forwarded-For": {"192.0.2.1, 198.51.100.9, 10.0.0.2"}}}, "198.51.100.9"},
		{"forwarded-trusted-proxy", []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromForwarded()},
			&keyfunc.Static{Remote: "10.0.0.1:4000", Headers: map[string][]string{"Forwarded": {`for="[2001:db8:5::7]:4711";proto=https, for=10.0.0.2`}}}, "2001:db8:5::/64"},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			f := keyfunc.IP(tc.opts...)
			if k, err := f(tc.r); err != nil || k != tc.want {
				b.Fatalf("key %q, %v; want %q", k, err, tc.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = f(tc.r)
			}
		})
	}
}

func BenchmarkComposed(b *testing.B) {
	r := &keyfunc.Static{RouteName: "/users/:id", Remote: "203.0.113.7:1", Headers: map[string][]string{"X-Api-Key": {"k-0123456789"}}}
	ip := keyfunc.IP()
	cases := []struct {
		name string
		f    keyfunc.Func
	}{
		{"join-ip-route", keyfunc.Join(ip, keyfunc.Route())},
		{"hash-header", keyfunc.Hash(keyfunc.Header("X-Api-Key"))},
		{"hmac-header", keyfunc.HMAC([]byte("0123456789abcdef0123456789abcdef"), keyfunc.Header("X-Api-Key"))},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = tc.f(r)
			}
		})
	}
}
