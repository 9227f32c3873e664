package adminapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/service/internal/jsonbody"
	"github.com/sluicehq/sluice/service/internal/rawtext"
)

// MaxBody bounds a request body; a larger one is answered 413.
const MaxBody = 64 << 10

var (
	errEmpty     = errors.New("empty body")
	errNotObject = errors.New("not an object")
)

// readJSON decodes r's body strictly into dst: application/json, at most
// MaxBody bytes, one JSON object with known members of the right types and
// nothing after it.
func readJSON(w http.ResponseWriter, r *http.Request, dst any) *apiError {
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		return fail(http.StatusUnsupportedMediaType, "Content-Type", "%q is not application/json", clip(ct))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fail(http.StatusRequestEntityTooLarge, "body", "larger than %d bytes", MaxBody)
		}
		return bad("body", "could not be read")
	}
	return decodeJSON(body, dst)
}

func decodeJSON(body []byte, dst any) *apiError {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	switch {
	case len(trimmed) == 0:
		return jsonError(errEmpty)
	case trimmed[0] != '{':
		return jsonError(errNotObject)
	}
	// Before decoding: encoding/json would turn invalid UTF-8 (and
	// unpaired surrogate escapes) into U+FFFD, and store that.
	if inv := rawtext.JSON(trimmed, ""); inv != nil {
		return bad(clip(inv.Field), "%s", inv.Message)
	}
	if name, ok := jsonbody.DuplicateMember(trimmed); ok {
		if name == "" {
			return bad("body", "member \"\" given twice")
		}
		return bad(clip(name), "given twice")
	}
	if err := jsonbody.Decode(trimmed, dst); err != nil {
		return jsonError(err)
	}
	return nil
}

// isJSON reports whether a Content-Type is JSON (application/json or any
// application/*+json, with parameters).
func isJSON(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// query is a request's query parameters, read strictly: only known names,
// each at most once.
type query struct{ v url.Values }

// readQuery parses r's query, refusing unknown or repeated parameters.
func readQuery(r *http.Request, known ...string) (query, *apiError) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return query{}, bad("query", "malformed query string")
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range v {
			if !yield(k) {
				return
			}
		}
	}) {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return query{}, bad(clip(k), "unknown query parameter (this resource takes none)")
			}
			return query{}, bad(clip(k), "unknown query parameter (known: %s)", strings.Join(known, ", "))
		}
		if len(v[k]) > 1 {
			return query{}, bad(k, "given %d times", len(v[k]))
		}
	}
	return query{v}, nil
}

func (q query) get(name string) string { return q.v.Get(name) }

func (q query) has(name string) bool { _, ok := q.v[name]; return ok }

// limit reads the page size: 1 to 1000, 100 when absent.
func (q query) limit() (int, *apiError) {
	if !q.has("limit") {
		return 100, nil
	}
	n, err := strconv.Atoi(q.get("limit"))
	if err != nil || n < 1 || n > 1000 {
		return 0, bad("limit", "must be an integer from 1 to 1000, got %q", clip(q.get("limit")))
	}
	return n, nil
}

// nextLink is the URL of the next page: r's path and query with the
// cursor replaced.
func nextLink(r *http.Request, cursor string) string {
	v, _ := url.ParseQuery(r.URL.RawQuery)
	v.Set("cursor", cursor)
	return fmt.Sprintf("<%s?%s>; rel=\"next\"", r.URL.EscapedPath(), v.Encode())
}
