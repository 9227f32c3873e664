package httpapi

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/jsonbody"
)

// plainAgrees fails t when decodePlain accepts body but encoding/json's
// strict decoding (jsonbody.Decode) refuses it or reads another Request.
func plainAgrees(t *testing.T, body string) bool {
	t.Helper()
	got, ok := decodePlain([]byte(body))
	if !ok {
		return false
	}
	var want Request
	require.NoError(t, jsonbody.Decode([]byte(body), &want), "decodePlain accepted %q", body)
	require.Equal(t, want, got, "%q", body)
	return true
}

// TestDecodePlainIsEncodingJSON: whatever body decodePlain accepts,
// encoding/json's strict decoding accepts too and reads the same Request,
// over random bodies built of the names (and other spellings of them),
// strings with escapes, non-ASCII and control characters, numbers of every
// form and range, null, white space, duplicates, nesting and trailing
// data; and the plain bodies clients send are accepted.
func TestDecodePlainIsEncodingJSON(t *testing.T) {
	for _, body := range []string{
		`{"key_type":"user","key_value":"u1","endpoint":"/api/v1/orders"}`,
		` { "key_type" : "ip" , "key_value" : "10.0.0.1" , "request_count" : 0 , "rule_id" : "per-ip", "idempotency_key": "k-1" } ` + "\n",
		`{"key_type":"user","key_value":"a","request_count":-9223372036854775808}`,
		`{"key_type":"user","key_value":"a","request_count":9223372036854775807}`,
		`{}`,
	} {
		require.True(t, plainAgrees(t, body), "%q refused", body)
	}
	r := rand.New(rand.NewPCG(21, 3))
	names := []string{"key_type", "key_value", "rule_id", "endpoint", "request_count", "idempotency_key", "Key_Type", "KEY_VALUE", "other", "", "key_type\\u0000"}
	values := []string{`"x"`, `""`, `"a b"`, `"/api/v1/orders/42"`, `"\u00e9"`, `"é"`, `"a\"b"`, `"a\\b"`, "\"\t\"", `"<&>"`, `null`, `true`, `0`, `-0`, `7`, `-12`, `01`, `1.0`, `1e3`, `-`, `9223372036854775807`, `9223372036854775808`, `-9223372036854775809`, `99999999999999999999`, `{}`, `[1]`, `"x`, `x`}
	spaces := []string{"", " ", "\n", "\t ", "\r\n"}
	accepted := 0
	for range 20000 {
		var b strings.Builder
		b.WriteString(spaces[r.IntN(len(spaces))])
		b.WriteByte('{')
		for k := range r.IntN(5) {
			if k > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s%q%s:%s%s%s", spaces[r.IntN(len(spaces))], names[r.IntN(len(names))], spaces[r.IntN(len(spaces))],
				spaces[r.IntN(len(spaces))], values[r.IntN(len(values))], spaces[r.IntN(len(spaces))])
		}
		if r.IntN(20) > 0 {
			b.WriteByte('}')
		}
		b.WriteString([]string{"", "", " ", "x", "{}", ","}[r.IntN(6)])
		if plainAgrees(t, b.String()) {
			accepted++
		}
	}
	require.Greater(t, accepted, 500, "random plain bodies were accepted")
}

// FuzzDecodePlain: decodePlain never accepts a body encoding/json's strict
// decoding refuses or reads otherwise.
func FuzzDecodePlain(f *testing.F) {
	f.Add(`{"key_type":"user","key_value":"u1","endpoint":"/api","request_count":3}`)
	f.Add(`{"key_type":"user","key_type":"ip"}`)
	f.Add(`{"request_count":-0}`)
	f.Fuzz(func(t *testing.T, body string) { plainAgrees(t, body) })
}

// A plain body is decoded with one allocation per string it keeps and one
// for its request_count.
func TestDecodePlainAllocations(t *testing.T) {
	body := []byte(`{"key_type":"user","key_value":"u1","endpoint":"/api/v1/orders","request_count":2}`)
	require.Equal(t, 4.0, testing.AllocsPerRun(100, func() {
		if _, ok := decodePlain(body); !ok {
			t.Fatal("refused")
		}
	}))
}
