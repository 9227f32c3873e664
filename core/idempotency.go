package core

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"time"

	"github.com/sluicehq/sluice/keyfunc"
)

// Idempotency counts retries of one request once.
type Idempotency struct {
	// Header carries the idempotency key (default "X-Idempotency-Key"). It
	// must be an RFC 9110 token.
	Header string
	// TTL is how long a request is remembered after its admission (default
	// 5 minutes): a whole number of microseconds, at least one second.
	TTL time.Duration
	// MaxRepeats is how many repeats within the TTL are free (default 3, at
	// most 1000); later ones are counted like any request, so the header
	// cannot bypass a limit.
	MaxRepeats int64
}

// maxIdempotentRepeats bounds Idempotency.MaxRepeats.
const maxIdempotentRepeats = 1000

// WithIdempotency makes a request that repeats an admitted one free, up to
// MaxRepeats times within the TTL. A repeat is the same request: the same
// idempotency key, method, route and path, cost, and identity under every
// policy that applies; anything else is counted. NewLimiter rejects invalid
// settings, naming the field.
//
// The first attempt is counted and its record written in one all-or-nothing
// store call (Store.Take), so a denied first attempt leaves no record and two
// first attempts that race are both counted; a repeat costs one or two more
// store calls. With the Redis store the record lives in the slot of the
// first policy's identity and is decided in the same atomic script; see
// docs/redis.md for groups whose identities sit in different Cluster slots.
func WithIdempotency(i Idempotency) LimiterOption {
	if i.Header == "" {
		i.Header = "X-Idempotency-Key"
	}
	if i.TTL == 0 {
		i.TTL = 5 * time.Minute
	}
	if i.MaxRepeats == 0 {
		i.MaxRepeats = 3
	}
	return func(c *limiterConfig) { c.idem = &i }
}

// validate reports why i cannot be used: an error whose *FieldError names
// the field of Idempotency.
func (i *Idempotency) validate() error {
	if fe := i.check(); fe != nil {
		return fmt.Errorf("sluice: WithIdempotency: %w", fe)
	}
	return nil
}

// check is validate's *FieldError.
func (i *Idempotency) check() *FieldError {
	for k := 0; k < len(i.Header); k++ {
		if !tchar(i.Header[k]) {
			return invalidField(nil, "Header", "%q is not a header name (an RFC 9110 token)", i.Header)
		}
	}
	switch {
	case i.TTL < time.Second || i.TTL%time.Microsecond != 0:
		return invalidField(nil, "TTL", "must be at least 1s and a whole number of microseconds, got %s", i.TTL)
	case i.MaxRepeats < 1 || i.MaxRepeats > maxIdempotentRepeats:
		return invalidField(nil, "MaxRepeats", "must be 1 to %d, got %d", maxIdempotentRepeats, i.MaxRepeats)
	}
	if fe := i.first().check(); fe != nil {
		return &FieldError{Field: "TTL", Message: fe.Message, Err: fe.Err}
	}
	if fe := i.repeats().check(); fe != nil {
		return &FieldError{Field: "MaxRepeats", Message: fe.Message, Err: fe.Err}
	}
	return nil
}

// first is the limit of a request's record: one admission per TTL.
func (i *Idempotency) first() Limit {
	return Limit{Algorithm: SlidingWindowLog, Rate: 1, Period: i.TTL}
}

// repeats is the limit of a request's repeat counter.
func (i *Idempotency) repeats() Limit {
	return Limit{Algorithm: SlidingWindowLog, Rate: i.MaxRepeats, Period: i.TTL}
}

// anchor returns the index of the result an idempotency record lives
// with: the first identified one that takes; -1 when none takes (the
// request is denied already, or peeks: there is nothing to repeat).
func anchor(rs []PolicyResult) int {
	for j := range rs {
		if p := &rs[j]; !p.Unidentified && p.cost > 0 {
			return j
		}
	}
	return -1
}

// idempotent decides a request or group that carries an idempotency key,
// whose record is rec; d holds its prepared Results.
//
// The record is a log of one event per TTL, taken in the same
// all-or-nothing group as the policies: it is written exactly when an
// original is admitted. If the record is already taken, an original of
// this very call was admitted within the TTL, and this one is a repeat:
// one Take on the repeat counter (MaxRepeats per TTL) says whether it is
// free. A repeat over MaxRepeats is decided like any call.
func (l *Limiter) idempotent(ctx context.Context, d *Decision, rec Key) error {
	i := l.cfg.idem
	first := Op{Key: rec, Limit: i.first(), Cost: 1}
	var seen Result
	if err := l.run(ctx, d, &first, &seen); err != nil {
		return err
	}
	if seen.Allowed {
		if d.Allowed { // the original, counted: its record is written
			d.idem = &idemRecord{key: rec, at: seen.At}
		}
		return nil
	}
	// The record is taken: an original of this call was admitted.
	repKey := Key{Identity: rec.Identity, Policy: rec.Policy + "/n"}
	var rep [1]Result
	if err := l.store.Take(ctx, []Op{{Key: repKey, Limit: i.repeats(), Cost: 1}}, rep[:]); err != nil {
		return fmt.Errorf("sluice: idempotency: %w", err)
	}
	if !rep[0].Allowed { // over MaxRepeats: counted like any call
		d.Allowed = true
		return l.run(ctx, d, nil, nil)
	}
	d.Allowed, d.Repeat = true, true
	for j := range d.Results {
		p := &d.Results[j]
		p.Allowed, p.RetryAfter, p.cost = true, 0, 0 // nothing counted, nothing to refund
	}
	d.Binding = binding(d.Results)
	return nil
}

// digest is the SHA-256 of an unambiguous (length-prefixed) encoding of
// the fields written to it.
type digest struct {
	h hash.Hash
	n [binary.MaxVarintLen64]byte
}

func newDigest() *digest { return &digest{h: sha256.New()} }

func (g *digest) uint(v uint64) { g.h.Write(g.n[:binary.PutUvarint(g.n[:], v)]) }

func (g *digest) field(s string) {
	g.uint(uint64(len(s)))
	g.h.Write([]byte(s))
}

// key is the record key of the digest, with identity.
func (g *digest) key(identity string) Key {
	var sum [sha256.Size]byte
	return Key{Identity: identity, Policy: "idem/" + base64.RawURLEncoding.EncodeToString(g.h.Sum(sum[:0]))}
}

// recordKey returns the store key of a request's idempotency record: the
// anchor policy's identity, under the policy "idem/" with a digest of
// everything that makes the request the same: the idempotency key, method,
// route, path, cost, and every applying policy with its identity. Policy
// names cannot contain "/", so a record key is never a policy's key; and
// two different requests get different digests.
func recordKey(r keyfunc.Request, cost int64, d *Decision, anchor int, value string) Key {
	g := newDigest()
	g.field("sluice-idempotency-1")
	g.field(value)
	g.field(r.Method())
	g.field(r.Route())
	g.field(r.Path())
	g.uint(uint64(cost))
	g.uint(uint64(len(d.Results)))
	for j := range d.Results {
		g.field(d.Results[j].Policy)
		g.field(d.Results[j].id)
	}
	g.uint(uint64(len(d.Skipped)))
	for _, s := range d.Skipped {
		g.field(s)
	}
	return g.key(d.Results[anchor].id)
}

// groupRecord returns the store key of a group's idempotency record, as
// recordKey does for a request: the digest of the call's key and scope
// and of every op's policy, identity and cost, in order. Its encoding
// starts with another tag than a request's, so a group never repeats a
// request.
func groupRecord(call *GroupCall, d *Decision, anchor int) Key {
	g := newDigest()
	g.field("sluice-idempotency-group-1")
	g.field(call.IdempotencyKey)
	g.uint(uint64(len(call.Scope)))
	for _, s := range call.Scope {
		g.field(s)
	}
	g.uint(uint64(len(d.Results)))
	for j := range d.Results {
		g.field(d.Results[j].Policy)
		g.field(d.Results[j].id)
		g.uint(uint64(d.Results[j].cost))
	}
	return g.key(d.Results[anchor].id)
}
