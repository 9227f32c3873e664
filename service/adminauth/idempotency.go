package adminauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// MaxIdempotentBody is the largest body of a POST with an Idempotency-Key
// (it is read whole, to be hashed): a larger one is 413.
const MaxIdempotentBody = 1 << 20

// finishTimeout bounds storing a response, which runs even when the client
// has gone (so the key does not stay in flight).
const finishTimeout = 5 * time.Second

// idempotentDeadline bounds the handler of a request with an
// Idempotency-Key (its context's deadline: its transactions roll back when
// it passes), so that it is over, its response stored or its key
// released, before the key's row could be taken as abandoned.
const idempotentDeadline = rulesdb.IdempotencyAbandoned - 10*time.Second

// validIdempotencyKey reports whether k is 1 to 255 printable ASCII
// characters (space included).
func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// requestHash is the SHA-256 of the request's method, target (its path
// and query: requestTarget) and body, each length-prefixed so no two
// requests share a preimage.
func requestHash(method, target string, body []byte) []byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(method), []byte(target), body} {
		var n [8]byte
		l := uint64(len(part))
		for i := range n {
			n[i] = byte(l >> (56 - 8*i))
		}
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// requestTarget is what names a request's resource: its path, and its
// query in canonical order when it has one (?dimension= says whose
// override a POST sets), so a key reused with another query is another
// request. A request without a query hashes as before the query counted.
func requestTarget(r *http.Request) string {
	q := r.URL.Query()
	if len(q) == 0 {
		return r.URL.Path
	}
	return r.URL.Path + "?" + q.Encode()
}

// idempotent runs h for a POST with an Idempotency-Key: once per key, its
// response stored and replayed (see Wrap).
func (a *Auth) idempotent(w http.ResponseWriter, r *http.Request, p Principal, h http.Handler) {
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	body, ok := idempotentBody(w, r)
	if !ok {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	stored, err := a.db.BeginIdempotent(r.Context(), p.Name, key, requestHash(r.Method, requestTarget(r), body))
	if a.answered(w, r, stored, err) {
		return
	}
	// This request owns the key: run h into a recorder, store, then send.
	rec := a.record(r, p, key, h)
	resp := rec.stored()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), finishTimeout)
	defer cancel()
	if err := a.db.FinishIdempotent(fctx, p.Name, key, resp); err != nil {
		// The response is still sent; a replay then sees the key in
		// flight (409), and after rulesdb.IdempotencyAbandoned runs anew
		// or, if the request wrote, learns that it was applied.
		a.log.ErrorContext(r.Context(), "admin: storing an idempotent response", "request_id", rulesdb.RequestID(r.Context()), "err", err)
	}
	for k, vs := range rec.header {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(resp.Body)
}

// idempotencyKey returns r's Idempotency-Key, or answers 400 when it has
// not exactly one valid key.
func idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	keys := r.Header.Values("Idempotency-Key")
	if len(keys) != 1 || !validIdempotencyKey(keys[0]) {
		writeProblem(w, r, http.StatusBadRequest, "Bad Request", "Idempotency-Key: must be one header of 1 to 255 printable ASCII characters",
			core.FieldError{Field: "Idempotency-Key", Message: "must be one header of 1 to 255 printable ASCII characters"})
		return "", false
	}
	return keys[0], true
}

// idempotentBody reads r's body whole, or answers 413 when it is larger
// than MaxIdempotentBody and 400 when it cannot be read.
func idempotentBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxIdempotentBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, r, http.StatusRequestEntityTooLarge, "Content Too Large", "body: at most 1 MiB with an Idempotency-Key",
				core.FieldError{Field: "body", Message: "at most 1 MiB"})
			return nil, false
		}
		writeProblem(w, r, http.StatusBadRequest, "Bad Request", "body: could not be read",
			core.FieldError{Field: "body", Message: "could not be read"})
		return nil, false
	}
	return body, true
}

// answered answers a request whose key BeginIdempotent did not give it
// (stored, err: what it returned): the stored response replayed, or the
// problem of a key used for another request, in flight or that could not
// be checked. false: the request owns the key and runs.
func (a *Auth) answered(w http.ResponseWriter, r *http.Request, stored *rulesdb.StoredResponse, err error) bool {
	switch {
	case errors.Is(err, rulesdb.ErrIdempotencyMismatch):
		writeProblem(w, r, http.StatusUnprocessableEntity, "Unprocessable Content",
			"Idempotency-Key: this key was used for a request with another method, path, query or body",
			core.FieldError{Field: "Idempotency-Key", Message: "already used for a different request"})
	case errors.Is(err, rulesdb.ErrIdempotencyInFlight):
		writeProblem(w, r, http.StatusConflict, "Conflict", "Idempotency-Key: the first request with this key is still being processed; retry later",
			core.FieldError{Field: "Idempotency-Key", Message: "a request with this key is in flight"})
	case err != nil:
		a.log.ErrorContext(r.Context(), "admin: idempotency key", "request_id", rulesdb.RequestID(r.Context()), "err", err)
		writeProblem(w, r, http.StatusServiceUnavailable, "Service Unavailable", "the idempotency key could not be checked; retry later")
	case stored != nil:
		for k, v := range stored.Header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(stored.Status)
		_, _ = w.Write(stored.Body)
	default:
		return false
	}
	return true
}

// record runs h, for the request that owns key, into a recorder, within
// idempotentDeadline; if h panics, the key is released (as a 5xx) and the
// panic goes on.
func (a *Auth) record(r *http.Request, p Principal, key string, h http.Handler) *recorder {
	ctx := r.Context()
	rec := &recorder{header: http.Header{}}
	done := false
	defer func() {
		if done {
			return
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		if err := a.db.FinishIdempotent(fctx, p.Name, key, rulesdb.StoredResponse{Status: http.StatusInternalServerError}); err != nil {
			a.log.ErrorContext(ctx, "admin: releasing an idempotency key", "request_id", rulesdb.RequestID(ctx), "err", err)
		}
	}()
	// The request must be over before its key could be taken as abandoned
	// (rulesdb.IdempotencyAbandoned): past that another request with the
	// key runs, and this one writing then would make the write twice.
	hctx, cancel := context.WithTimeout(ctx, idempotentDeadline)
	defer cancel()
	h.ServeHTTP(rec, r.WithContext(rulesdb.WithIdempotency(hctx, p.Name, key)))
	done = true
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec
}

// recorder captures a handler's response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

// stored is the response recorded, as stored: each header's values
// joined.
func (r *recorder) stored() rulesdb.StoredResponse {
	resp := rulesdb.StoredResponse{Status: r.status, Header: map[string]string{}, Body: r.body.Bytes()}
	for k, vs := range r.header {
		resp.Header[k] = strings.Join(vs, ", ")
	}
	return resp
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
