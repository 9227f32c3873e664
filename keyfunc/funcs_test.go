package keyfunc_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/keyfunc"
)

type ctxKey struct{ name string }

type userID int64

type tenant string

type account struct{ id string }

func (a *account) String() string { return "acct-" + a.id }

type label string

func (l label) String() string { return "label:" + string(l) }

func TestFuncs(t *testing.T) {
	userKey := ctxKey{"user"}
	withUser := func(v any) keyfunc.Static {
		return keyfunc.Static{Ctx: context.WithValue(context.Background(), userKey, v)}
	}
	base := keyfunc.Static{
		MethodName: "POST",
		RouteName:  "/users/:id",
		Headers:    map[string][]string{"X-Api-Key": {"k-123", "k-456"}, "X-Empty": {""}},
		Queries:    map[string]string{"api_key": "q-1", "empty": ""},
	}
	cases := []struct {
		name    string
		f       keyfunc.Func
		r       keyfunc.Request
		want    string
		noKey   bool   // the error wraps ErrNoKey
		wantErr string // another error, by substring
	}{
		{name: "header", f: keyfunc.Header("X-Api-Key"), r: base, want: "k-123"},
		{name: "header case-insensitive", f: keyfunc.Header("x-api-key"), r: base, want: "k-123"},
		{name: "header missing", f: keyfunc.Header("X-Other"), r: base, noKey: true},
		{name: "header empty", f: keyfunc.Header("X-Empty"), r: base, noKey: true},
		{name: "query", f: keyfunc.Query("api_key"), r: base, want: "q-1"},
		{name: "query missing", f: keyfunc.Query("nope"), r: base, noKey: true},
		{name: "query empty", f: keyfunc.Query("empty"), r: base, noKey: true},
		{name: "route", f: keyfunc.Route(), r: base, want: "/users/:id"},
		{name: "route empty", f: keyfunc.Route(), r: keyfunc.Static{}, noKey: true},
		{name: "method", f: keyfunc.Method(), r: base, want: "POST"},
		{name: "method empty", f: keyfunc.Method(), r: keyfunc.Static{}, noKey: true},
		{name: "const", f: keyfunc.Const("global"), r: keyfunc.Static{}, want: "global"},
		{name: "context string", f: keyfunc.FromContext(userKey), r: withUser("alice"), want: "alice"},
		{name: "context named string", f: keyfunc.FromContext(userKey), r: withUser(tenant("acme")), want: "acme"},
		{name: "context int", f: keyfunc.FromContext(userKey), r: withUser(42), want: "42"},
		{name: "context negative int", f: keyfunc.FromContext(userKey), r: withUser(-7), want: "-7"},
		{name: "context int64", f: keyfunc.FromContext(userKey), r: withUser(int64(1) << 40), want: "1099511627776"},
		{name: "context int32", f: keyfunc.FromContext(userKey), r: withUser(int32(5)), want: "5"},
		{name: "context uint64", f: keyfunc.FromContext(userKey), r: withUser(uint64(1) << 63), want: "9223372036854775808"},
		{name: "context uint8", f: keyfunc.FromContext(userKey), r: withUser(uint8(9)), want: "9"},
		{name: "context named int", f: keyfunc.FromContext(userKey), r: withUser(userID(77)), want: "77"},
		{name: "context stringer", f: keyfunc.FromContext(userKey), r: withUser(&account{id: "9"}), want: "acct-9"},
		{name: "context value stringer", f: keyfunc.FromContext(userKey), r: withUser(label("x")), want: "label:x"},
		{name: "context missing", f: keyfunc.FromContext(userKey), r: keyfunc.Static{}, noKey: true},
		{name: "context other key type", f: keyfunc.FromContext("user"), r: withUser("alice"), noKey: true},
		{name: "context empty string", f: keyfunc.FromContext(userKey), r: withUser(""), noKey: true},
		{name: "context zero int", f: keyfunc.FromContext(userKey), r: withUser(0), noKey: true},
		{name: "context zero named int", f: keyfunc.FromContext(userKey), r: withUser(userID(0)), noKey: true},
		{name: "context nil stringer", f: keyfunc.FromContext(userKey), r: withUser((*account)(nil)), noKey: true},
		{name: "context empty stringer", f: keyfunc.FromContext(userKey), r: withUser(label("")), want: "label:"},
		{name: "context nil pointer", f: keyfunc.FromContext(userKey), r: withUser((*int)(nil)), noKey: true},
		{name: "context float", f: keyfunc.FromContext(userKey), r: withUser(1.5), wantErr: "float64"},
		{name: "context bool", f: keyfunc.FromContext(userKey), r: withUser(true), wantErr: "bool"},
		{name: "context pointer", f: keyfunc.FromContext(userKey), r: withUser(new(int)), wantErr: "*int"},
		{name: "join", f: keyfunc.Join(keyfunc.Header("X-Api-Key"), keyfunc.Route()), r: base, want: "k-123|/users/:id"},
		{name: "join one", f: keyfunc.Join(keyfunc.Const("a|b%")), r: base, want: "a%7Cb%25"},
		{name: "join escapes", f: keyfunc.Join(keyfunc.Const("a|b"), keyfunc.Const("c%7C")), r: base, want: "a%7Cb|c%257C"},
		{name: "join error", f: keyfunc.Join(keyfunc.Route(), keyfunc.Header("X-Other")), r: base, noKey: true},
		{name: "join empty part", f: keyfunc.Join(keyfunc.Route(), emptyFunc), r: base, noKey: true},
		{name: "join other error", f: keyfunc.Join(keyfunc.Route(), failFunc), r: base, wantErr: "boom"},
		{name: "hash error", f: keyfunc.Hash(keyfunc.Header("X-Other")), r: base, noKey: true},
		{name: "hash empty", f: keyfunc.Hash(emptyFunc), r: base, noKey: true},
		{name: "hmac error", f: keyfunc.HMAC([]byte("s"), keyfunc.Header("X-Other")), r: base, noKey: true},
		{name: "hmac empty", f: keyfunc.HMAC([]byte("s"), emptyFunc), r: base, noKey: true},
		{name: "hash other error", f: keyfunc.Hash(failFunc), r: base, wantErr: "boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.f(tc.r)
			switch {
			case tc.noKey:
				require.ErrorIs(t, err, keyfunc.ErrNoKey)
				require.True(t, strings.HasPrefix(err.Error(), "keyfunc: "), err.Error())
				require.Empty(t, got)
			case tc.wantErr != "":
				require.ErrorContains(t, err, tc.wantErr)
				require.NotErrorIs(t, err, keyfunc.ErrNoKey)
				require.Empty(t, got)
			default:
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
			}
		})
	}
}

func emptyFunc(keyfunc.Request) (string, error) { return "", nil }

func failFunc(keyfunc.Request) (string, error) { return "", errors.New("boom") }

func TestJoinUnambiguous(t *testing.T) {
	join := func(parts ...string) string {
		fs := make([]keyfunc.Func, len(parts))
		for i, p := range parts {
			fs[i] = keyfunc.Const(p)
		}
		k, err := keyfunc.Join(fs...)(keyfunc.Static{})
		require.NoError(t, err)
		return k
	}
	require.NotEqual(t, join("a|b", "c"), join("a", "b|c"))
	require.Equal(t, "a%7Cb|c", join("a|b", "c"))
	require.Equal(t, "a|b%7Cc", join("a", "b|c"))
	require.NotEqual(t, join("a%7Cb"), join("a|b"))
	require.NotEqual(t, join("a|b"), join("a", "b"))

	// Every split of a few awkward strings into tuples gives distinct keys.
	atoms := []string{"a", "|", "%", "%7C", "%25", "7C", "b|", "|c"}
	seen := map[string][]string{}
	var walk func(prefix []string, depth int)
	walk = func(prefix []string, depth int) {
		if len(prefix) > 0 {
			k := join(prefix...)
			if prev, ok := seen[k]; ok {
				require.Equal(t, prev, prefix, "key %q", k)
			}
			seen[k] = append([]string(nil), prefix...)
		}
		if depth == 0 {
			return
		}
		for _, a := range atoms {
			for _, b := range atoms {
				walk(append(prefix, a+b), depth-1)
			}
		}
	}
	walk(nil, 2)
	require.Len(t, seen, 64+64*64)
}

func TestHashStable(t *testing.T) {
	independent := func(v string) string {
		sum := sha256.Sum256([]byte(v))
		return base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	cases := []struct{ in, want string }{
		// Fixed outputs, also computed outside Go: base64url(sha256(in)[:16]).
		{"203.0.113.7", "_sUlZaoM8Y9X189bOscoUA"},
		{"api-key-123", "B0wf0aydHGfsIuiuhB20xQ"},
	}
	for _, tc := range cases {
		got, err := keyfunc.Hash(keyfunc.Const(tc.in))(keyfunc.Static{})
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
		require.Equal(t, independent(tc.in), got)
		require.Len(t, got, 22)
	}
	long := strings.Repeat("x", 10000)
	got, err := keyfunc.Hash(keyfunc.Const(long))(keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, independent(long), got)

	a, _ := keyfunc.Hash(keyfunc.Const("a"))(keyfunc.Static{})
	b, _ := keyfunc.Hash(keyfunc.Const("b"))(keyfunc.Static{})
	require.NotEqual(t, a, b)
}

func TestHMAC(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	independent := func(key []byte, v string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(v))
		return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
	}
	f := keyfunc.HMAC(secret, keyfunc.Const("203.0.113.7"))
	got, err := f(keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, "VafJujnHYulz_88pQ2HHjw", got)
	require.Equal(t, independent(secret, "203.0.113.7"), got)

	// The secret is copied: changing the caller's slice changes nothing.
	secret[0] = 'X'
	again, err := f(keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, got, again)

	other, err := keyfunc.HMAC([]byte("another secret"), keyfunc.Const("203.0.113.7"))(keyfunc.Static{})
	require.NoError(t, err)
	require.NotEqual(t, got, other)
	plain, err := keyfunc.Hash(keyfunc.Const("203.0.113.7"))(keyfunc.Static{})
	require.NoError(t, err)
	require.NotEqual(t, plain, got)

	// Concurrent use shares pooled hashes safely.
	g := keyfunc.HMAC([]byte("k"), keyfunc.Header("X-V"))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				v := fmt.Sprintf("v-%d-%d", i, j)
				got, err := g(keyfunc.Static{Headers: map[string][]string{"X-V": {v}}})
				if err != nil || got != independent([]byte("k"), v) {
					t.Errorf("HMAC(%q) = %q, %v", v, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestConstructorsPanic(t *testing.T) {
	cases := map[string]func(){
		"Const empty":        func() { keyfunc.Const("") },
		"Header empty":       func() { keyfunc.Header("") },
		"Query empty":        func() { keyfunc.Query("") },
		"FromContext nil":    func() { keyfunc.FromContext(nil) },
		"Join none":          func() { keyfunc.Join() },
		"Join nil":           func() { keyfunc.Join(keyfunc.Route(), nil) },
		"Hash nil":           func() { keyfunc.Hash(nil) },
		"HMAC nil":           func() { keyfunc.HMAC([]byte("s"), nil) },
		"HMAC empty secret":  func() { keyfunc.HMAC(nil, keyfunc.Route()) },
		"HMAC empty secret2": func() { keyfunc.HMAC([]byte{}, keyfunc.Route()) },
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			require.PanicsWithValue(t, panicValue(fn), fn)
			require.True(t, strings.HasPrefix(fmt.Sprint(panicValue(fn)), "keyfunc: "))
		})
	}
}

func panicValue(fn func()) (v any) {
	defer func() { v = recover() }()
	fn()
	return nil
}

func TestJoinCopiesArguments(t *testing.T) {
	fs := []keyfunc.Func{keyfunc.Const("a"), keyfunc.Const("b")}
	j := keyfunc.Join(fs...)
	fs[0] = keyfunc.Const("z")
	k, err := j(keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, "a|b", k)
}

func TestErrNoKeyIdentity(t *testing.T) {
	require.EqualError(t, keyfunc.ErrNoKey, "sluice: empty key")
}

// TestNoKeyMessages: a key function's error for a request without its value
// wraps ErrNoKey but says what was missing once, without ErrNoKey's text
// appended (a policy's error then reads `sluice: policy "p": key: keyfunc:
// header "X-User" is empty`).
func TestNoKeyMessages(t *testing.T) {
	type ctxKey struct{}
	unixPeer := keyfunc.Static{Remote: "@"}
	cases := []struct {
		f    keyfunc.Func
		r    keyfunc.Request
		want string
	}{
		{keyfunc.Header("X-User"), keyfunc.Static{}, `keyfunc: header "X-User" is empty`},
		{keyfunc.Query("user"), keyfunc.Static{}, `keyfunc: query parameter "user" is empty`},
		{keyfunc.Route(), keyfunc.Static{}, `keyfunc: no route`},
		{keyfunc.Method(), keyfunc.Static{}, `keyfunc: no method`},
		{keyfunc.FromContext(ctxKey{}), keyfunc.Static{}, `keyfunc: no value for context key keyfunc_test.ctxKey({})`},
		{keyfunc.Join(keyfunc.Const("a"), func(keyfunc.Request) (string, error) { return "", nil }), keyfunc.Static{}, `keyfunc: a key function returned an empty key`},
		{keyfunc.IP(), unixPeer, `keyfunc: no client IP: transport peer "@" is not an IP address and no trusted header gave one`},
		{keyfunc.Hash(keyfunc.Header("X-User")), keyfunc.Static{}, `keyfunc: header "X-User" is empty`},
	}
	for _, tc := range cases {
		_, err := tc.f(tc.r)
		require.ErrorIs(t, err, keyfunc.ErrNoKey)
		require.EqualError(t, err, tc.want)
	}
}
