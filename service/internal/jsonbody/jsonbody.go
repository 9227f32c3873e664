// Package jsonbody decodes the JSON request bodies of ratelimitd's HTTP
// APIs strictly: one value, no unknown object members, nothing after it.
// Each API words its own errors; this package tells them apart.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// ErrTrailing is Decode's error for a body with more than white space after
// its JSON value.
var ErrTrailing = errors.New("jsonbody: trailing data after the JSON value")

// Decode decodes body, one JSON value, into dst, refusing object members
// dst has no field for (encoding/json's error: see UnknownField) and
// anything but white space after the value (ErrTrailing). Other errors are
// encoding/json's (*json.SyntaxError, *json.UnmarshalTypeError, io.EOF for
// an empty body, io.ErrUnexpectedEOF for a truncated one).
func Decode(body []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return ErrTrailing
	}
	return nil
}

// UnknownField returns the member name of Decode's error for an object
// member dst has no field for.
func UnknownField(err error) (name string, ok bool) {
	if err == nil {
		return "", false
	}
	quoted, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	name, _ = strconv.Unquote(quoted)
	return name, true
}

// DuplicateMember reports a member name the top-level object of body gives
// twice (encoding/json would keep the last silently). A body that is not
// an object, or not well-formed, reports none: the decoder's error says
// what is wrong with it.
func DuplicateMember(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		name, _ := t.(string)
		if seen[name] {
			return name, true
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}
