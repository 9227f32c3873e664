package keyfunc_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/keyfunc"
)

// By default only the transport peer counts: a client connecting directly
// cannot pick its bucket by sending X-Forwarded-For.
func ExampleIP() {
	ip := keyfunc.IP()
	r := keyfunc.Static{
		Remote:  "203.0.113.7:51234",
		Headers: map[string][]string{"X-Forwarded-For": {"198.51.100.1"}},
	}
	fmt.Println(ip(r))
	// Output: 203.0.113.7 <nil>
}

// Behind a load balancer in 10.0.0.0/8, the client is the rightmost
// X-Forwarded-For entry that is not a trusted proxy. Entries the client wrote
// itself are to the left of it and are never reached.
func ExampleTrustProxies() {
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"))
	r := keyfunc.Static{
		Remote: "10.0.0.1:4000",
		Headers: map[string][]string{
			// "198.51.100.1" was sent by the client; the load balancer
			// appended the address it saw, 203.0.113.7, and an inner proxy
			// appended 10.1.2.3.
			"X-Forwarded-For": {"198.51.100.1, 203.0.113.7, 10.1.2.3"},
		},
	}
	fmt.Println(ip(r))
	// Output: 203.0.113.7 <nil>
}

// With a fixed number of proxies, the client is the n-th entry from the right.
func ExampleTrustHops() {
	ip := keyfunc.IP(keyfunc.TrustHops(2))
	r := keyfunc.Static{
		Remote:  "172.16.0.5:4000",
		Headers: map[string][]string{"X-Forwarded-For": {"198.51.100.1, 203.0.113.7, 172.16.0.9"}},
	}
	fmt.Println(ip(r))
	// Output: 203.0.113.7 <nil>
}

// RFC 7239 Forwarded, with a quoted IPv6 node and port. IPv6 clients are
// keyed by their /64 unless IPv6Prefix says otherwise.
func ExampleFromForwarded() {
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromForwarded(), keyfunc.IPv6Prefix(56))
	r := keyfunc.Static{
		Remote:  "10.0.0.1:4000",
		Headers: map[string][]string{"Forwarded": {`for="[2001:db8:cafe:17::1]:4711";proto=https`}},
	}
	fmt.Println(ip(r))
	// Output: 2001:db8:cafe::/56 <nil>
}

func ExampleIPExtractor_ClientIP() {
	e, err := keyfunc.NewIPExtractor(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromClientIPHeader("X-Real-IP"))
	if err != nil {
		panic(err)
	}
	viaProxy := keyfunc.Static{Remote: "10.0.0.1:4000", Headers: map[string][]string{"X-Real-IP": {"[::ffff:203.0.113.7]:443"}}}
	direct := keyfunc.Static{Remote: "192.0.2.1:5000", Headers: map[string][]string{"X-Real-IP": {"203.0.113.7"}}}
	unixPeer := keyfunc.Static{Remote: "@"}
	fmt.Println(e.ClientIP(viaProxy))
	fmt.Println(e.ClientIP(direct))
	_, err = e.ClientIP(unixPeer)
	fmt.Println(errors.Is(err, keyfunc.ErrNoKey))
	// Output:
	// 203.0.113.7 <nil>
	// 192.0.2.1 <nil>
	// true
}

// When the options come from configuration, NewIPExtractor reports every
// mistake as an error (IP would panic with it).
func ExampleNewIPExtractor() {
	_, err := keyfunc.NewIPExtractor(keyfunc.TrustHops(2), keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.IPv6Prefix(0))
	fmt.Println(err)
	// Output:
	// keyfunc: IPv6Prefix: 0 is out of range [1, 128]
	// keyfunc: TrustHops: cannot be combined with TrustProxies, TrustPrefixes or TrustUnixSocket
}

type userKey struct{}

// A per-user, per-endpoint limit: the user that authentication middleware
// stored in the context, joined with the route template.
func ExampleJoin() {
	key := keyfunc.Join(keyfunc.FromContext(userKey{}), keyfunc.Route())
	ctx := context.WithValue(context.Background(), userKey{}, "alice")
	fmt.Println(key(keyfunc.Static{Ctx: ctx, RouteName: "/orders/:id"}))

	_, err := key(keyfunc.Static{RouteName: "/orders/:id"}) // not logged in
	fmt.Println(errors.Is(err, keyfunc.ErrNoKey))
	// Output:
	// alice|/orders/:id <nil>
	// true
}

// An API key is stored as a digest, never in the clear.
func ExampleHash() {
	key := keyfunc.Hash(keyfunc.Header("X-API-Key"))
	r := keyfunc.Static{Headers: map[string][]string{"X-Api-Key": {"api-key-123"}}}
	fmt.Println(key(r))
	// Output: B0wf0aydHGfsIuiuhB20xQ <nil>
}

func ExampleHMAC() {
	secret := []byte("0123456789abcdef0123456789abcdef") // load from your secret store
	ip := keyfunc.IP()
	key := keyfunc.HMAC(secret, ip)
	fmt.Println(key(keyfunc.Static{Remote: "203.0.113.7:1"}))
	// Output: VafJujnHYulz_88pQ2HHjw <nil>
}

// One bucket for everyone, on purpose: a global ceiling.
func ExampleConst() {
	key := keyfunc.Const("global")
	fmt.Println(key(keyfunc.Static{}))
	// Output: global <nil>
}

func ExampleHeader() {
	key := keyfunc.Header("X-API-Key")
	fmt.Println(key(keyfunc.Static{Headers: map[string][]string{"X-Api-Key": {"k-1"}}}))
	_, err := key(keyfunc.Static{})
	fmt.Println(err)
	// Output:
	// k-1 <nil>
	// keyfunc: header "X-API-Key" is empty
}
