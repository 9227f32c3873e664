package jsonbody_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

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

	err := jsonbody.Decode([]byte(`{"id":"a","colour":"red"}`), &r)
	name, ok := jsonbody.UnknownField(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, "colour", name)
	_, ok = jsonbody.UnknownField(errors.New("other"))
	require.False(t, ok)
	_, ok = jsonbody.UnknownField(nil)
	require.False(t, ok)

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
	if name, ok := jsonbody.UnknownField(err); ok {
		fmt.Printf("%s: unknown field\n", name)
	}
	// Output: limt: unknown field
}
