package config_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestFractionalNumbersAreErrors: YAML's decoder truncates a fraction, so
// "limit: 1.5" loaded as 1. Every whole-number field now rejects it, naming
// file:line:field.
func TestFractionalNumbersAreErrors(t *testing.T) {
	pol := func(extra string) string {
		return "policies:\n  - name: a\n    key: ip\n    window_seconds: 1\n" + extra
	}
	cases := []struct{ doc, want string }{
		{pol("    limit: 1.5\n"), `bad.yaml:5: policies[0].limit: must be a whole number >= 1, got "1.5"`},
		{pol("    limit: 9.99\n"), `bad.yaml:5: policies[0].limit: must be a whole number >= 1, got "9.99"`},
		{pol("    limit: 1e-3\n"), `bad.yaml:5: policies[0].limit: must be a whole number`},
		{pol("    limit: .inf\n"), `bad.yaml:5: policies[0].limit: must be a whole number`},
		{pol("    limit: .nan\n"), `bad.yaml:5: policies[0].limit: must be a whole number`},
		{pol("    limit: \"5\"\n"), `bad.yaml:5: policies[0].limit: must be a whole number`},
		{pol("    limit: true\n"), `bad.yaml:5: policies[0].limit: must be a whole number`},
		{pol("    limit: [5]\n"), `bad.yaml:5: policies[0].limit: must be a whole number`},
		{pol("    limit: 99999999999999999999\n"), `bad.yaml:5: policies[0].limit: must be a whole number`},
		{pol("    limit: 5\n    burst: 7.5\n"), `bad.yaml:6: policies[0].burst: must be a whole number >= 0, got "7.5"`},
		{pol("    limit: 5\n    tiers:\n      gold: {limit: 2.5, window_seconds: 1}\n"), `bad.yaml:7: policies[0].tiers.gold.limit: must be a whole number >= 1, got "2.5"`},
		{pol("    limit: 5\n    tiers:\n      gold: {limit: 2, window_seconds: 1, burst: 0.5}\n"), `bad.yaml:7: policies[0].tiers.gold.burst: must be a whole number >= 0, got "0.5"`},
		{"client_ip:\n  trusted_hops: 1.5\n" + pol("    limit: 5\n"), `bad.yaml:2: client_ip.trusted_hops: must be a whole number >= 0, got "1.5"`},
		{"client_ip:\n  ipv6_prefix: 56.5\n" + pol("    limit: 5\n"), `bad.yaml:2: client_ip.ipv6_prefix: must be a whole number >= 1, got "56.5"`},
		{"client_ip:\n  ipv4_prefix: 24.1\n" + pol("    limit: 5\n"), `bad.yaml:2: client_ip.ipv4_prefix: must be a whole number >= 1, got "24.1"`},
		{"failure:\n  mode: fallback\n  instances: 2.5\n" + pol("    limit: 5\n"), `bad.yaml:3: failure.instances: must be a whole number >= 1, got "2.5"`},
		{"failure:\n  breaker: {failures: 1.5}\n" + pol("    limit: 5\n"), `bad.yaml:2: failure.breaker.failures: must be a whole number >= 1, got "1.5"`},
		{"failure:\n  deny_cache: {max_keys: 10.5}\n" + pol("    limit: 5\n"), `bad.yaml:2: failure.deny_cache.max_keys: must be a whole number >= 1, got "10.5"`},
	}
	for _, c := range cases {
		_, err := config.ParseFile("bad.yaml", []byte(c.doc))
		require.ErrorContains(t, err, c.want, c.doc)
	}
	js := `{"policies": [{"name": "a", "key": "ip", "window_seconds": 1,
  "limit": 1.5}]}`
	_, err := config.Parse("limits.json", []byte(js))
	require.ErrorContains(t, err, `limits.json:2: policies[0].limit: must be a whole number >= 1, got "1.5"`)
}

// TestWholeNumberProperty: for random numeric spellings, limit loads iff the
// number is whole and >= 1, and then loads as exactly that number.
func TestWholeNumberProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var text string
		var want int64 // 0: must fail
		n := rng.Int64N(2_000_000) - 1000
		switch rng.IntN(6) {
		case 0:
			text = strconv.FormatInt(n, 10)
			want = n
		case 1: // a whole float
			text = strconv.FormatInt(n, 10) + ".0"
			want = n
		case 2: // an exponent
			text = fmt.Sprintf("%de%d", n, rng.IntN(4))
			want = n
			for e := text[strings.IndexByte(text, 'e')+1:]; e != "0"; e = strconv.Itoa(mustAtoi(e) - 1) {
				want *= 10
			}
		case 3: // a fraction
			frac := 1 + rng.IntN(999)
			text = fmt.Sprintf("%d.%03d", n, frac)
			if frac%1000 == 0 {
				want = n
			}
		case 4: // hex, as YAML 1.2 reads it
			text = fmt.Sprintf("0x%x", max(n, 0))
			want = max(n, 0)
		default: // a string
			text = fmt.Sprintf("%q", strconv.FormatInt(n, 10))
		}
		if want < 1 {
			want = 0
		}
		doc := "policies:\n  - {name: a, key: ip, window_seconds: 1, limit: " + text + "}\n"
		ps, err := config.Parse("p.yaml", []byte(doc))
		if want == 0 {
			require.ErrorContains(t, err, "p.yaml:2: policies[0].limit: must be a whole number >= 1", text)
			continue
		}
		require.NoError(t, err, text)
		require.Equal(t, want, ps[0].Limit.Rate, text)
	}
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// TestMethodsMustBeOneToken: "ANY" or a list in one string matched no
// request, silently leaving the route unlimited. Each is an error naming
// file:line:field; RFC 9110 tokens in one case pass, and "*" is any method.
func TestMethodsMustBeOneToken(t *testing.T) {
	doc := func(methods string) string {
		return "policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    match:\n      methods: " + methods + "\n"
	}
	bad := []struct{ methods, want string }{
		{`[ANY]`, `bad.yaml:7: policies[0].match.methods[0]: Methods: "ANY" is not a method`},
		{`[GET, any]`, `bad.yaml:7: policies[0].match.methods[1]: Methods: "any" is not a method`},
		{`["GET,POST"]`, `bad.yaml:7: policies[0].match.methods[0]: Methods: "GET,POST" is not a method token`},
		{`["GET POST"]`, `bad.yaml:7: policies[0].match.methods[0]: Methods: "GET POST" is not a method token`},
		{`["GET;POST"]`, `bad.yaml:7: policies[0].match.methods[0]: Methods: "GET;POST" is not a method token`},
		{`["GET\tPOST"]`, `bad.yaml:7: policies[0].match.methods[0]: Methods: "GET\tPOST" is not a method token`},
		{`[""]`, `bad.yaml:7: policies[0].match.methods[0]: Methods: an empty method`},
		{`[GeT]`, `bad.yaml:7: policies[0].match.methods[0]: Methods: "GeT" mixes cases`},
		{`["GÉT"]`, `bad.yaml:7: policies[0].match.methods[0]: Methods: "GÉT" is not a method token`},
		{`["GET/1"]`, `bad.yaml:7: policies[0].match.methods[0]: Methods: "GET/1" is not a method token`},
		{`GET`, `bad.yaml:7: policies[0].match.methods: must be a list of strings`},
	}
	for _, c := range bad {
		_, err := config.Parse("bad.yaml", []byte(doc(c.methods)))
		require.ErrorContains(t, err, c.want, c.methods)
	}
	for _, ok := range []string{`[GET]`, `[get, post]`, `[PROPFIND, M-SEARCH, PATCH]`, `[POST]`, `["*"]`} {
		ps, err := config.Parse("ok.yaml", []byte(doc(ok)))
		require.NoError(t, err, ok)
		s, err := memorystore.New()
		require.NoError(t, err)
		_, err = core.NewLimiter(s, ps)
		require.NoError(t, err, ok)
		require.NoError(t, s.Close())
	}
}

// TestEmptyTierNameIsAnError: a tier named "" replaced the default limit
// whenever the tier lookup failed.
func TestEmptyTierNameIsAnError(t *testing.T) {
	for _, name := range []string{`""`, `" "`, `''`} {
		doc := "policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    tiers:\n      gold: {limit: 50, window_seconds: 1}\n      " + name + ": {limit: 500, window_seconds: 1}\n"
		_, err := config.Parse("bad.yaml", []byte(doc))
		require.ErrorContains(t, err, "bad.yaml:8: policies[0].tiers[", name)
		require.ErrorContains(t, err, "a tier needs a name", name)
	}
}

// manyPolicies returns a file with n policies.
func manyPolicies(n int) []byte {
	var b strings.Builder
	b.WriteString("policies:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {name: p%d, key: ip, limit: 5, window_seconds: 1}\n", i)
	}
	return []byte(b.String())
}

// TestPolicyCountLimit: a file with a huge number of policies made every
// request slow; beyond the limit it is rejected before any policy is read.
func TestPolicyCountLimit(t *testing.T) {
	_, err := config.Parse("big.yaml", manyPolicies(config.DefaultMaxPolicies+1))
	require.ErrorContains(t, err, fmt.Sprintf("big.yaml:2: policies: %d policies, more than the limit of %d", config.DefaultMaxPolicies+1, config.DefaultMaxPolicies))
	ps, err := config.Parse("big.yaml", manyPolicies(config.DefaultMaxPolicies))
	require.NoError(t, err)
	require.Len(t, ps, config.DefaultMaxPolicies)

	_, err = config.Parse("small.yaml", manyPolicies(4), config.WithMaxPolicies(3))
	require.ErrorContains(t, err, "small.yaml:2: policies: 4 policies, more than the limit of 3 (see WithMaxPolicies)")
	ps, err = config.Parse("small.yaml", manyPolicies(3), config.WithMaxPolicies(3))
	require.NoError(t, err)
	require.Len(t, ps, 3)
	// The count is checked before any policy: the invalid policies of an
	// oversized list are not reported one by one.
	_, err = config.Parse("small.yaml", []byte("policies: [1, 2, 3, 4]\n"), config.WithMaxPolicies(3))
	require.ErrorContains(t, err, "4 policies")
	require.NotContains(t, err.Error(), "policies[0]")
	more, err := config.Parse("big.yaml", manyPolicies(config.DefaultMaxPolicies+1), config.WithMaxPolicies(config.DefaultMaxPolicies+1))
	require.NoError(t, err)
	require.Len(t, more, config.DefaultMaxPolicies+1)
}

// TestFileSizeLimit: a file beyond the limit is rejected before it is
// parsed, and Load stops reading it after the limit.
func TestFileSizeLimit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "huge.yaml")
	// Valid YAML up to the limit, then garbage: the error is the size, not
	// a parse error, so the file was never parsed.
	data := append([]byte("# "+strings.Repeat("x", config.DefaultMaxBytes)+"\n"), "policies: [\n"...)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	for _, load := range []func() error{
		func() error { _, err := config.Load(path); return err },
		func() error { _, err := config.LoadFile(path); return err },
		func() error { _, err := config.Parse(path, data); return err },
		func() error { _, err := config.ParseFile(path, data); return err },
	} {
		err := load()
		require.ErrorContains(t, err, fmt.Sprintf("config: %s: the file is larger than %d bytes (see WithMaxBytes)", path, config.DefaultMaxBytes))
	}
	// A file of exactly the limit is read.
	okDoc := "policies:\n  - {name: a, key: ip, limit: 5, window_seconds: 1}\n"
	okPath := filepath.Join(dir, "ok.yaml")
	require.NoError(t, os.WriteFile(okPath, []byte(okDoc), 0o600))
	_, err := config.Load(okPath, config.WithMaxBytes(int64(len(okDoc))))
	require.NoError(t, err)
	_, err = config.Load(okPath, config.WithMaxBytes(int64(len(okDoc)-1)))
	require.ErrorContains(t, err, fmt.Sprintf("larger than %d bytes", len(okDoc)-1))
	// An endless file: Load returns at once instead of reading forever.
	if _, err := os.Stat("/dev/zero"); err == nil {
		done := make(chan error, 1)
		go func() { _, err := config.Load("/dev/zero", config.WithMaxBytes(1<<20)); done <- err }()
		select {
		case err := <-done:
			require.ErrorContains(t, err, "larger than 1048576 bytes")
		case <-time.After(10 * time.Second):
			t.Fatal("Load kept reading an endless file")
		}
	}
	// Invalid limits are errors naming the option.
	_, err = config.Load(okPath, config.WithMaxBytes(0))
	require.ErrorContains(t, err, "config: WithMaxBytes: must be at least 1")
	_, err = config.Parse("x", []byte(okDoc), config.WithMaxPolicies(-1))
	require.ErrorContains(t, err, "config: WithMaxPolicies: must be at least 1")
}

// TestWatchAppliesFileLimits: Watch and LoadInto take the same limits.
func TestWatchAppliesFileLimits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	require.NoError(t, os.WriteFile(path, manyPolicies(3), 0o600))
	s, err := memorystore.New()
	require.NoError(t, err)
	defer s.Close()
	l, err := core.NewLimiter(s, []core.Policy{{Name: "boot", Key: keyfunc.Const("x"), Limit: core.PerSecond(1)}})
	require.NoError(t, err)
	_, err = config.Watch(path, l, config.WithFileOptions(config.WithMaxPolicies(2)))
	require.ErrorContains(t, err, "3 policies, more than the limit of 2")
	require.ErrorContains(t, config.LoadInto(t.Context(), path, l, config.WithMaxBytes(10)), "larger than 10 bytes")
	require.Equal(t, "boot", l.Policies()[0].Name)

	reloads := make(chan error, 10)
	w, err := config.Watch(path, l, config.Every(10*time.Millisecond), config.WithFileOptions(config.WithMaxPolicies(3)),
		config.OnReload(func(err error) { reloads <- err }))
	require.NoError(t, err)
	defer w.Close()
	require.Len(t, l.Policies(), 3)
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, manyPolicies(4), 0o600))
	require.NoError(t, os.Rename(tmp, path))
	select {
	case err := <-reloads:
		require.ErrorContains(t, err, "4 policies, more than the limit of 3")
	case <-time.After(10 * time.Second):
		t.Fatal("no reload")
	}
	require.Len(t, l.Policies(), 3)
}

// TestMethodProperty: for random method strings, config accepts exactly the
// single-case RFC 9110 tokens other than ANY and ALL (and "*"), reports the
// others at file:line:field, and every method it accepts the Limiter
// accepts too.
func TestMethodProperty(t *testing.T) {
	const alphabet = "GETPOSTgetpost-_.!*~ ,;|\t/\"é0"
	tchar := func(c rune) bool {
		return c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c))
	}
	rng := rand.New(rand.NewPCG(9, 9))
	s, err := memorystore.New()
	require.NoError(t, err)
	defer s.Close()
	var valid, total int
	for range 3000 {
		runes := []rune(alphabet)
		n := rng.IntN(6)
		var b strings.Builder
		for range n {
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
		m := b.String()
		if rng.IntN(10) == 0 {
			m = []string{"*", "ANY", "any", "All", "GET", "get", "M-SEARCH"}[rng.IntN(7)]
		}
		want := m != "" && strings.IndexFunc(m, func(c rune) bool { return !tchar(c) }) < 0 &&
			!strings.EqualFold(m, "ANY") && !strings.EqualFold(m, "ALL") &&
			(strings.ToUpper(m) == m || strings.ToLower(m) == m)
		doc := fmt.Sprintf("policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    match:\n      methods: [%s]\n", strconv.Quote(m))
		ps, err := config.Parse("m.yaml", []byte(doc))
		total++
		if !want {
			require.ErrorContains(t, err, "m.yaml:7: policies[0].match.methods[0]: ", "%q", m)
			continue
		}
		valid++
		require.NoError(t, err, "%q", m)
		require.Equal(t, []string{m}, ps[0].Match.Methods)
		_, err = core.NewLimiter(s, ps)
		require.NoError(t, err, "config accepted %q but the Limiter does not", m)
	}
	require.Greater(t, valid, total/10)
	require.Less(t, valid, total*9/10)
}

// TestTrustEverythingInConfig: client_ip.trusted_proxies that cover every
// address are an error at the list's line, as are entries that do not parse.
func TestTrustEverythingInConfig(t *testing.T) {
	pol := "policies:\n  - {name: a, key: ip, limit: 5, window_seconds: 1}\n"
	cases := []struct{ doc, want string }{
		{"client_ip:\n  trusted_proxies: [0.0.0.0/0]\n" + pol, `bad.yaml:2: client_ip.trusted_proxies: keyfunc: TrustProxies: the trusted networks cover every IPv4 address`},
		{"client_ip:\n  trusted_proxies:\n    - 10.0.0.0/8\n    - ::/0\n" + pol, `bad.yaml:3: client_ip.trusted_proxies: keyfunc: TrustProxies: the trusted networks cover every IPv6 address`},
		{"client_ip:\n  trusted_proxies: [0.0.0.0/1, 128.0.0.0/1]\n  header: forwarded\n" + pol, `bad.yaml:2: client_ip.trusted_proxies: keyfunc: TrustProxies: the trusted networks cover every IPv4 address`},
		{"client_ip:\n  trusted_proxies:\n    - 10.0.0.0/8\n    - proxy.internal\n" + pol, `bad.yaml:4: client_ip.trusted_proxies[1]: "proxy.internal" is neither a CIDR nor an address`},
	}
	for _, c := range cases {
		_, err := config.Parse("bad.yaml", []byte(c.doc))
		require.ErrorContains(t, err, c.want, c.doc)
		require.Equal(t, 1, strings.Count(err.Error(), "config: "), "one error, not repeats: %v", err)
	}
	_, err := config.Parse("ok.yaml", []byte("client_ip:\n  trusted_proxies: [0.0.0.0/1, 10.0.0.0/8, \"2001:db8::/32\"]\n"+pol))
	require.NoError(t, err)
}
