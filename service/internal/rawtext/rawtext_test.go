package rawtext_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/internal/rawtext"
	"github.com/sluicehq/sluice/service/internal/rawtext/rawtexttest"
)

// Every invalid sequence and every unpaired surrogate escape, in a value,
// a nested value, an array element or a member name, is found and named by
// its path; the sequences really are what encoding/json would replace.
func TestJSONFindsEveryInvalidString(t *testing.T) {
	samples := append([]rawtexttest.Sample{}, rawtexttest.Invalid...)
	for _, s := range rawtexttest.Invalid {
		require.False(t, utf8.ValidString(s.Bytes), s.Name)
	}
	for _, s := range rawtexttest.Escapes {
		var got string
		require.NoError(t, json.Unmarshal([]byte(`"`+s.Bytes+`"`), &got))
		require.Contains(t, got, "\uFFFD", "%s: encoding/json replaces it", s.Name)
	}
	samples = append(samples, rawtexttest.Escapes...)
	for _, s := range samples {
		for _, c := range []struct{ body, root, field string }{
			{`{"id":"ok","name":"` + s.Bytes + `","limit":5}`, "", "name"},
			{`{"a":{"b":[1,"x",{"c":"` + s.Bytes + `"}]}}`, "", "a.b[2].c"},
			{`[{"id":"a"},{"id":"b","name":"` + s.Bytes + `"}]`, "rules", "rules[1].name"},
			{`"` + s.Bytes + `"`, "", "body"},
			{`{"n` + s.Bytes + `":1}`, "", "body"},
			{`{"o":{"n` + s.Bytes + `":1}}`, "", "o"},
			{` {"e\"sc\\aped":"` + s.Bytes + `"} `, "", `e"sc\aped`},
		} {
			inv := rawtext.JSON([]byte(c.body), c.root)
			require.NotNil(t, inv, "%s in %q", s.Name, c.body)
			require.Equal(t, c.field, inv.Field, "%s in %q", s.Name, c.body)
			require.True(t, utf8.ValidString(inv.Message), inv.Message)
		}
	}
}

// Valid text passes: every code point class, escapes of every kind,
// surrogate pairs, a literal U+FFFD, and bodies that are not JSON at all
// (the decoder's to refuse).
func TestJSONPassesValidText(t *testing.T) {
	for _, body := range []string{
		`{}`, `[]`, `{"a":"b"}`, `{"name":"caf\u00e9 é 日本 😀 \uD83D\uDE00 \ufffd �"}`,
		`{"a":"\"\\\/\b\f\n\r\t\u0000"}`, `{"a":[1,2.5e3,true,false,null,{"b":"\\ud800"}]}`,
		`not json`, `{"a":`, `{"a" 1}`, `{"a":"\u12"}`, ``,
	} {
		require.Nil(t, rawtext.JSON([]byte(body), ""), body)
	}
	// Invalid bytes outside any string: the body.
	inv := rawtext.JSON([]byte("{\"a\":1\xff}"), "")
	require.Equal(t, "body", inv.Field)
	inv = rawtext.JSON([]byte("[1,\xff]"), "rules")
	require.Equal(t, "rules", inv.Field)
}

// Values names the parameter whose value is invalid, and "query" (or
// "form") for an invalid name; Query reads a request's raw query.
func TestValues(t *testing.T) {
	for _, s := range rawtexttest.Invalid {
		inv := rawtext.Values(url.Values{"a": {"ok"}, "cursor": {"x", s.Bytes}}, "query")
		require.Equal(t, "cursor", inv.Field, s.Name)
		inv = rawtext.Values(url.Values{"n" + s.Bytes: {"ok"}}, "form")
		require.Equal(t, "form", inv.Field, s.Name)
		require.True(t, utf8.ValidString(inv.Message))
		r := httptest.NewRequest(http.MethodGet, "/x?limit=1&actor="+url.QueryEscape(s.Bytes), nil)
		require.Equal(t, "actor", rawtext.Query(r).Field, s.Name)
	}
	require.Nil(t, rawtext.Values(url.Values{"a": {"é", ""}}, "query"))
	require.Nil(t, rawtext.Query(httptest.NewRequest(http.MethodGet, "/x?a=%zz", nil)), "malformed: the handler's")
}

// PathValues names the wildcard whose decoded value is invalid.
func TestPathValues(t *testing.T) {
	for _, s := range rawtexttest.Invalid {
		var got *core.FieldError
		mux := http.NewServeMux()
		mux.HandleFunc("/users/{id}/override/{rule}", func(_ http.ResponseWriter, r *http.Request) { got = rawtext.PathValues(r) })
		mux.HandleFunc("/raw/", func(_ http.ResponseWriter, r *http.Request) { got = rawtext.PathValues(r) })
		for path, want := range map[string]string{
			"/users/" + url.PathEscape(s.Bytes) + "/override/r": "id",
			"/users/u/override/" + url.PathEscape(s.Bytes):      "rule",
			"/raw/" + url.PathEscape(s.Bytes):                   "path",
		} {
			got = nil
			mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
			require.NotNil(t, got, path)
			require.Equal(t, want, got.Field, path)
		}
	}
	var got *core.FieldError
	mux := http.NewServeMux()
	mux.HandleFunc("/users/{id}", func(_ http.ResponseWriter, r *http.Request) { got = rawtext.PathValues(r) })
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/users/"+url.PathEscape("é/"+strings.Repeat("x", 3)), nil))
	require.Nil(t, got)
}
