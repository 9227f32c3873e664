package keyfunc

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"reflect"
	"strconv"
	"sync"
)

// Header returns a Func that keys a request by the first value of the named
// header, such as an API key ("X-API-Key"). The name is matched
// case-insensitively. An absent or empty header is an error wrapping
// ErrNoKey.
//
// A client chooses its headers: keyed by a value nobody has checked, it gets
// a fresh bucket for every value it invents. Limit by IP as well, or key by
// the identity that authentication derived from the header (FromContext).
// Wrap the Func with Hash or HMAC to keep raw keys out of the store. Header
// panics if name is empty.
func Header(name string) Func {
	if name == "" {
		panic("keyfunc: Header with an empty name")
	}
	errEmpty := noKey("keyfunc: header %q is empty", name)
	return func(r Request) (string, error) {
		if v := r.Header(name); v != "" {
			return v, nil
		}
		return "", errEmpty
	}
}

// Query returns a Func that keys a request by the first value of the named
// URL query parameter. An absent or empty parameter, and every gRPC request,
// is an error wrapping ErrNoKey. Like a header, a query parameter is chosen by
// the client. Query panics if name is empty.
func Query(name string) Func {
	if name == "" {
		panic("keyfunc: Query with an empty name")
	}
	errEmpty := noKey("keyfunc: query parameter %q is empty", name)
	return func(r Request) (string, error) {
		if v := r.Query(name); v != "" {
			return v, nil
		}
		return "", errEmpty
	}
}

var (
	errNoRoute  = noKey("keyfunc: no route")
	errNoMethod = noKey("keyfunc: no method")
)

// Route returns a Func that keys a request by its route template
// ("/users/:id"), or by the full method name for gRPC. It is meant to be
// joined with an identity (Join(ip, Route())) for per-endpoint limits; alone
// it is one bucket per endpoint shared by every client. A request that
// matched no route is an error wrapping ErrNoKey.
func Route() Func {
	return func(r Request) (string, error) {
		if v := r.Route(); v != "" {
			return v, nil
		}
		return "", errNoRoute
	}
}

// Method returns a Func that keys a request by its method ("GET"). An empty
// method is an error wrapping ErrNoKey.
func Method() Func {
	return func(r Request) (string, error) {
		if v := r.Method(); v != "" {
			return v, nil
		}
		return "", errNoMethod
	}
}

// Const returns a Func that gives every request the key s: one bucket shared
// by all clients, on purpose, such as a global ceiling in front of a fragile
// backend. Const panics if s is empty, since an empty key is never valid and
// the mistake is best found when the policy is built.
func Const(s string) Func {
	if s == "" {
		panic("keyfunc: Const with an empty key")
	}
	return func(Request) (string, error) { return s, nil }
}

// FromContext returns a Func that keys a request by the value stored under
// key in its context, typically the authenticated user or tenant put there by
// authentication middleware that runs before the limiter. Accepted values are
// strings, fmt.Stringers and integers, including named types of those kinds
// (type UserID int64). A missing value, a nil pointer, "" and the integer 0
// (what an unset ID holds) are errors wrapping ErrNoKey; a value of any other
// type is an error that does not. FromContext panics if key is nil.
func FromContext(key any) Func {
	if key == nil {
		panic("keyfunc: FromContext with a nil key")
	}
	errEmpty := noKey("keyfunc: no value for context key %T(%v)", key, key)
	return func(r Request) (string, error) {
		s, ok := contextString(r.Context().Value(key))
		switch {
		case !ok:
			return "", fmt.Errorf("keyfunc: context key %T(%v) holds a %T, not a string, fmt.Stringer or integer", key, key, r.Context().Value(key))
		case s == "":
			return "", errEmpty
		}
		return s, nil
	}
}

// contextString converts a context value to a key; "" means empty and ok
// false means an unsupported type.
func contextString(v any) (s string, ok bool) {
	switch v := v.(type) {
	case nil:
		return "", true
	case string:
		return v, true
	case int64:
		return intString(v), true
	case int:
		return intString(int64(v)), true
	case uint64:
		return uintString(v), true
	case fmt.Stringer:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return "", true
		}
		return v.String(), true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.String:
		return rv.String(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intString(rv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return uintString(rv.Uint()), true
	case reflect.Pointer:
		if rv.IsNil() {
			return "", true
		}
	}
	return "", false
}

func intString(i int64) string {
	if i == 0 {
		return ""
	}
	return strconv.FormatInt(i, 10)
}

func uintString(u uint64) string {
	if u == 0 {
		return ""
	}
	return strconv.FormatUint(u, 10)
}

var errEmptyPart = noKey("keyfunc: a key function returned an empty key")

// Join returns a Func whose key combines the keys of fs, in order, such as
// Join(userFunc, Route()) for a per-user, per-endpoint limit. In each part
// "%" is written as "%25" and "|" as "%7C", and the parts are separated by
// "|", so different tuples never share a key: ("a|b", "c") and ("a", "b|c")
// give "a%7Cb|c" and "a|b%7Cc". The first error of a part is returned as is;
// a part that is "" without an error is an error wrapping ErrNoKey. Join
// panics if fs is empty or holds a nil Func.
func Join(fs ...Func) Func {
	if len(fs) == 0 {
		panic("keyfunc: Join of no Func")
	}
	for _, f := range fs {
		if f == nil {
			panic("keyfunc: Join of a nil Func")
		}
	}
	fs = append([]Func(nil), fs...)
	return func(r Request) (string, error) {
		var buf [128]byte
		b := buf[:0]
		for i, f := range fs {
			v, err := f(r)
			if err != nil {
				return "", err
			}
			if v == "" {
				return "", errEmptyPart
			}
			if i > 0 {
				b = append(b, '|')
			}
			b = appendEscaped(b, v)
		}
		return string(b), nil
	}
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b = append(b, "%25"...)
		case '|':
			b = append(b, "%7C"...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// digestLen is how many bytes of a SHA-256 digest Hash and HMAC keep: 128
// bits, encoded as 22 characters of unpadded base64url.
const digestLen = 16

// Hash returns a Func whose key is a digest of the key of f, so that raw
// addresses or API keys are not stored in Redis or shown in metrics: the first
// 16 bytes of SHA-256 of the key, encoded with base64.RawURLEncoding (22
// characters). It is stable across processes, machines and versions. Anyone
// who can guess the input can confirm the guess (an IPv4 address space is
// small); use HMAC when that matters. Errors of f are returned as is. Hash
// panics if f is nil.
func Hash(f Func) Func {
	if f == nil {
		panic("keyfunc: Hash of a nil Func")
	}
	return func(r Request) (string, error) {
		v, err := f(r)
		if err != nil {
			return "", err
		}
		if v == "" {
			return "", errEmptyPart
		}
		sum := sha256.Sum256([]byte(v))
		return encodeDigest(sum[:digestLen]), nil
	}
}

// HMAC is Hash keyed with secret: the first 16 bytes of HMAC-SHA256(secret,
// key), base64url without padding. Without the secret a stored key cannot be
// linked back to an address or API key by guessing. Use at least 32 random
// bytes, the same on every instance that shares a store; changing it moves
// every client to a fresh bucket. The secret is copied. HMAC panics if secret
// is empty or f is nil.
func HMAC(secret []byte, f Func) Func {
	if len(secret) == 0 {
		panic("keyfunc: HMAC with an empty secret")
	}
	if f == nil {
		panic("keyfunc: HMAC of a nil Func")
	}
	key := append([]byte(nil), secret...)
	pool := &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}
	return func(r Request) (string, error) {
		v, err := f(r)
		if err != nil {
			return "", err
		}
		if v == "" {
			return "", errEmptyPart
		}
		h := pool.Get().(hash.Hash)
		h.Reset()
		h.Write([]byte(v))
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		pool.Put(h)
		return encodeDigest(sum[:digestLen]), nil
	}
}

func encodeDigest(d []byte) string {
	var out [22]byte // base64.RawURLEncoding.EncodedLen(digestLen)
	base64.RawURLEncoding.Encode(out[:], d)
	return string(out[:])
}
