package openapitest

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"
)

// maxKept bounds the bytes of a body kept for validation; the test suites
// send bodies a little over the servers' bounds (64 KiB, 1 MiB), never
// near this.
const maxKept = 8 << 20

// Handler returns h behind the Validator: every exchange h serves is
// checked once h returns, and one that does not match fails tb.
func (v *Validator) Handler(tb testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := &keep{rc: r.Body}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = in
		}
		out := &recorder{ResponseWriter: w}
		h.ServeHTTP(out, r)
		// The body as the client sent it: the part the handler did not
		// read is read here (a handler refusing a request early reads
		// none of it).
		in.drain()
		out.finish()
		x := &exchange{req: r, reqBody: in.bytes(), status: out.status, header: out.sent, body: out.body.Bytes()}
		if err := v.check(r.Context(), x); err != nil {
			tb.Errorf("openapitest: %v\nrequest body: %.512s\nresponse body: %.512s", err, x.reqBody, x.body)
		}
	})
}

// Transport returns rt (http.DefaultTransport when nil) behind the
// Validator: every exchange through it is checked when the response's body
// has been read, and one that does not match fails tb.
func (v *Validator) Transport(tb testing.TB, rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(io.LimitReader(r.Body, maxKept))
			_ = r.Body.Close()
			if err != nil {
				return nil, err
			}
			body = b
			r = requestWithBody(r, b)
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		}
		res, err := rt.RoundTrip(r)
		if err != nil {
			return res, err
		}
		got, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if err != nil {
			// A body cut short is the test's to see, unvalidated.
			res.Body = io.NopCloser(io.MultiReader(bytes.NewReader(got), errReader{err}))
			return res, nil
		}
		res.Body = io.NopCloser(bytes.NewReader(got))
		x := &exchange{req: r, reqBody: body, status: res.StatusCode, header: res.Header, body: got}
		if err := v.check(r.Context(), x); err != nil {
			tb.Errorf("openapitest: %v\nrequest body: %.512s\nresponse body: %.512s", err, body, got)
		}
		return res, nil
	})
}

// Client returns a copy of c (a zero client when nil) whose transport is
// behind the Validator.
func (v *Validator) Client(tb testing.TB, c *http.Client) *http.Client {
	out := &http.Client{}
	if c != nil {
		*out = *c
	}
	out.Transport = v.Transport(tb, out.Transport)
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// keep is a request body that keeps what is read of it.
type keep struct {
	rc  io.ReadCloser
	mu  sync.Mutex
	buf bytes.Buffer
}

func (k *keep) Read(p []byte) (int, error) {
	n, err := k.rc.Read(p)
	k.mu.Lock()
	if k.buf.Len() < maxKept {
		k.buf.Write(p[:n])
	}
	k.mu.Unlock()
	return n, err
}

func (k *keep) Close() error { return k.rc.Close() }

// drain reads what the handler left of the body, up to maxKept (a body
// the server closed reads nothing more).
func (k *keep) drain() {
	if k.rc == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(k, maxKept))
}

func (k *keep) bytes() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return bytes.Clone(k.buf.Bytes())
}

// recorder passes a response through, keeping its status, its header as
// sent and its body.
type recorder struct {
	http.ResponseWriter
	status int
	sent   http.Header
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
		r.sent = r.Header().Clone()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.body.Len() < maxKept {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

// finish sets the status of a handler that wrote nothing (200).
func (r *recorder) finish() {
	if r.status == 0 {
		r.status = http.StatusOK
		r.sent = r.Header().Clone()
	}
}

// Unwrap lets http.ResponseController reach the server's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
