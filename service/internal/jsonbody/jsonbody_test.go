package jsonbody_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/internal/jsonbody"
)

type rule struct {
	ID    string `json:"id"`
	Limit int64  `json:"limit"`
}

func TestDecode(t *testing.T) {
	var r rule
	require.NoError(t, jsonbody.Decode([]byte(" {\"id\":\"a\",\"limit\":3} \n"), &r))
	require.Equal(t, rule{ID: "a", Limit: 3}, r)

	require.ErrorIs(t, jsonbody.Decode([]byte(`{"id":"a"} {}`), &r), jsonbody.ErrTrailing)
	require.ErrorIs(t, jsonbody.Decode([]byte(`{"id":"a"} x`), &r), jsonbody.ErrTrailing)
	require.ErrorIs(t, jsonbody.Decode(nil, &r), io.EOF)
	require.ErrorIs(t, jsonbody.Decode([]byte(`{"id":`), &r), io.ErrUnexpectedEOF)

	var fe *core.FieldError
	require.ErrorAs(t, jsonbody.Decode([]byte(`{"id":"a","colour":"red"}`), &r), &fe)
	require.Equal(t, "colour", fe.Field)
	require.Equal(t, "unknown field", fe.Message)
	// A member takes its field in another case of ASCII letters, as
	// encoding/json does; a name with another letter must be exact.
	require.NoError(t, jsonbody.Decode([]byte(`{"ID":"b","LiMiT":4}`), &r))
	require.Equal(t, rule{ID: "b", Limit: 4}, r)
	require.ErrorAs(t, jsonbody.Decode([]byte(`{"\u212aey":1}`), &struct {
		Key int `json:"key"`
	}{}), &fe, "the Kelvin sign is not k here")
	require.Equal(t, "\u212aey", fe.Field)
	require.ErrorAs(t, jsonbody.Decode([]byte(`{"skip":1}`), &struct {
		Skip int `json:"-"`
	}{}), &fe)
	type inner struct {
		Deep int `json:"deep"`
	}
	require.NoError(t, jsonbody.Decode([]byte(`{"deep":1,"top":2}`), &struct {
		inner
		Top int `json:"top"`
	}{}), "an embedded struct's fields are the struct's")
	require.NoError(t, jsonbody.Decode([]byte(`[1]`), &[]int{}), "not a struct: the decoder decides")

	var typ *json.UnmarshalTypeError
	require.ErrorAs(t, jsonbody.Decode([]byte(`{"limit":"x"}`), &r), &typ)
	require.Equal(t, "limit", typ.Field)
	var syn *json.SyntaxError
	require.ErrorAs(t, jsonbody.Decode([]byte(`{"limit":}`), &r), &syn)
}

func TestDuplicateMember(t *testing.T) {
	for body, want := range map[string]string{
		`{"id":"a","limit":1,"id":"b"}`: "id",
		`{"a":{"x":1,"x":2},"b":1}`:     "", // nested objects are the decoder's
		`{"":1,"":2}`:                   "",
		`[1,1]`:                         "",
		`{"id":`:                        "",
	} {
		name, ok := jsonbody.DuplicateMember([]byte(body))
		require.Equal(t, want, name, body)
		require.Equal(t, body == `{"id":"a","limit":1,"id":"b"}` || body == `{"":1,"":2}`, ok, body)
	}
}

func ExampleDecode() {
	var r rule
	err := jsonbody.Decode([]byte(`{"id":"orders","limt":5}`), &r)
	var fe *core.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe)
	}
	// Output: limt: unknown field
}
