// Package jsonbody decodes the JSON request bodies of ratelimitd's HTTP
// APIs strictly: one value, no unknown object members, nothing after it.
// Each API words its own errors; this package tells them apart.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
)

// ErrTrailing is Decode's error for a body with more than white space after
// its JSON value.
var ErrTrailing = errors.New("jsonbody: trailing data after the JSON value")

// Decode decodes body, one JSON value, into dst, refusing anything but
// white space after the value (ErrTrailing) and, when dst points to a
// struct, a member of the body's object that none of its fields takes: a
// *core.FieldError naming the member (Message "unknown field"). A member
// takes a field of its name (its json tag's, or the Go name's), or of its
// name in another case of ASCII letters ("ID" for "id"); a name with any
// other letter must be the field's exactly. Other errors are
// encoding/json's (*json.SyntaxError, *json.UnmarshalTypeError, io.EOF for
// an empty body, io.ErrUnexpectedEOF for a truncated one).
func Decode(body []byte, dst any) error {
	if name, ok := unknownMember(body, dst); ok {
		return &core.FieldError{Field: name, Message: "unknown field"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields() // what unknownMember cannot see: nested objects
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return ErrTrailing
	}
	return nil
}

// unknownMember returns the first member of body's top-level object that
// no field of the struct dst points to takes (see Decode); none when dst is
// not a pointer to a struct or body is not a well-formed object.
func unknownMember(body []byte, dst any) (string, bool) {
	t := reflect.TypeOf(dst)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return "", false
	}
	var unknown string
	found := false
	members(body, func(name string) bool {
		if !takes(t.Elem(), name) {
			unknown, found = name, true
		}
		return !found
	})
	return unknown, found
}

// takes reports whether a field of struct t takes the member name.
func takes(t reflect.Type, name string) bool {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-":
			continue
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			if takes(f.Type, name) {
				return true
			}
			continue
		case !f.IsExported():
			continue
		case tag == "":
			tag = f.Name
		}
		if name == tag || asciiFold(name, tag) {
			return true
		}
	}
	return false
}

// asciiFold reports whether a and b, both ASCII, are equal but for case.
func asciiFold(a, b string) bool {
	for i := 0; i < len(a); i++ {
		if a[i] >= utf8.RuneSelf {
			return false
		}
	}
	return strings.EqualFold(a, b)
}

// members calls yield with each member name of body's top-level object, in
// order, until it returns false; it stops at the first thing that is not
// well-formed (the decoder reports it).
func members(body []byte, yield func(name string) bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return
		}
		name, _ := t.(string)
		if !yield(name) {
			return
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return
		}
	}
}

// DuplicateMember reports a member name the top-level object of body gives
// twice (encoding/json would keep the last silently). A body that is not
// an object, or not well-formed, reports none: the decoder's error says
// what is wrong with it.
func DuplicateMember(body []byte) (string, bool) {
	seen := map[string]bool{}
	dup, found := "", false
	members(body, func(name string) bool {
		if seen[name] {
			dup, found = name, true
		}
		seen[name] = true
		return !found
	})
	return dup, found
}
