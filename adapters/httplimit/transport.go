package httplimit

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/core"
)

// Transport is an http.RoundTripper for outbound calls: before sending a
// request it waits (core.Limiter.WaitN) for a slot of the request's
// identity under one policy of Limiter, within the request's context
// deadline, so a client of a rate-limited API shapes its calls instead of
// collecting 429s. Several processes sharing one store (Redis) share the
// limit. A request whose slot would come after its context's deadline is
// not sent: RoundTrip fails at once with an error wrapping
// core.ErrWouldExceedDeadline.
//
//	client := &http.Client{Transport: &httplimit.Transport{Limiter: l, Policy: "github"}}
//
// Its fields must not change while it is in use.
type Transport struct {
	// Base sends the request once it may go (nil: http.DefaultTransport).
	Base http.RoundTripper
	// Limiter and Policy name the limit to wait for (required).
	Limiter *core.Limiter
	Policy  string
	// Key returns the identity the request is counted under (nil: the
	// request's URL host, so each remote host has its own limit).
	Key func(*http.Request) (string, error)
	// Cost returns the units the request takes (nil, or 0: 1, as the
	// adapters' WithCost).
	Cost func(*http.Request) int64
}

// RoundTrip waits for the request's slot, then sends it with Base. When
// the wait fails the request is not sent, its body is closed and the error
// is returned.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.wait(req); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("httplimit: Transport: %w", err)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(req)
}

func (t *Transport) wait(req *http.Request) error {
	if t.Limiter == nil {
		return errors.New("no Limiter")
	}
	id := req.URL.Host
	if t.Key != nil {
		var err error
		if id, err = t.Key(req); err != nil {
			return fmt.Errorf("key: %w", err)
		}
	}
	cost := int64(1)
	if t.Cost != nil {
		if c := t.Cost(req); c != 0 {
			cost = c
		}
	}
	_, err := t.Limiter.WaitN(req.Context(), t.Policy, id, cost)
	return err
}
