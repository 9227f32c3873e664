package algo

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// bucketRef is the bucket step in its plain form, each field of the
// Outcome written as soon as it is known: the reference that bucket, the
// same computation ordered for speed (locals first, the Outcome stored at
// once), must match exactly.
func (sp *Spec) bucketRef(st *State, o *Outcome, now, cost, book int64) {
	var d int64
	gap := st.Expire - now
	if gap > 0 {
		// A clock stepped back by years could overflow the product: such a
		// key is far beyond full either way (it is denied below, and its
		// TAT is never rewritten from the clamped debt).
		d = min(gap, sp.maxGap)*sp.Q - st.V
	}
	beyond := gap > sp.maxGap
	reset := d
	if beyond { // full again once the gap has passed: V < Q, so at exactly Expire
		reset = Micros(gap)
	}
	prevState := st.State
	if gap <= 0 {
		prevState = 0 // an expired key is a fresh key
	}
	if cost > sp.Capacity {
		never(o, max(sp.Full-d, 0)/sp.T, reset, prevState, now)
		return
	}
	if gap <= 0 {
		*st = State{}
	}
	need := max(cost, 1) * sp.T
	over := d - sp.Full + need // > 0: the units until the cost fits (in this order in Lua)
	var delay int64            // µs from now to the booked slot
	if over > 0 && book > 0 {
		delay = (over + sp.Q - 1) / sp.Q
	}
	o.Allowed, o.Retry = (over <= 0 || book > 0 && delay <= book) && !beyond, 0
	switch {
	case !o.Allowed && beyond:
		o.Retry, delay = Micros(sp.beyondWait(gap, need, st.V)), 0
	case !o.Allowed:
		o.Retry, delay = over, 0
	case cost > 0:
		d = max(d, delay*sp.Q) + need
		if sp.Q == 1 {
			st.Expire, st.V = now+d, 0
		} else {
			units := (d + sp.Q - 1) / sp.Q
			st.Expire, st.V = now+units, units*sp.Q-d
		}
	}
	if o.Allowed {
		o.Retry = delay * sp.Q
	}
	o.Remaining, o.Reset, o.At = max(sp.Full-d, 0)/sp.T, d, now+delay
	if beyond {
		o.Reset = reset
	}
	sp.settle(st, o, cost, d)
}

// The bucket step answers and stores exactly what its reference does, on
// random limits (fractional intervals, Q up to 10^9, bursts
// above and below the rate), random states (fresh, expired, full, over
// full, stepped back within and beyond the clamp, every warning state),
// costs around the capacity and booking bounds from none to far past
// MaxDelay.
func TestBucketMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 1))
	algs := []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA}
	for range 2000 {
		l := core.Limit{Algorithm: algs[rng.IntN(3)], Rate: 1 + rng.Int64N(2000), Period: time.Duration(1+rng.Int64N(5_000_000)) * time.Microsecond}
		switch rng.IntN(4) {
		case 0:
			l.Rate = 1_000_000_000 - rng.Int64N(1000) // Q near 10^9: a small clamp
		case 1:
			l.Burst = 1 + rng.Int64N(3*l.Rate)
		}
		sp := MustCompile(l)
		for range 200 {
			now := int64(1_700_000_000_000_000) + rng.Int64N(1_000_000)
			var st State
			switch rng.IntN(6) {
			case 0: // fresh
			case 1: // expired
				st = State{Expire: now - rng.Int64N(sp.Period+1), V: rng.Int64N(sp.Q), State: core.State(rng.IntN(3))}
			case 2: // beyond the clamp
				st = State{Expire: now + sp.maxGap + 1 + rng.Int64N(1<<40), V: rng.Int64N(sp.Q), State: core.State(rng.IntN(3))}
			default: // within, up to twice full
				st = State{Expire: now + 1 + rng.Int64N(2*sp.Full/sp.Q+2), V: rng.Int64N(sp.Q), State: core.State(rng.IntN(3))}
			}
			cost := rng.Int64N(sp.Capacity + 3)
			var book int64
			switch rng.IntN(4) {
			case 1:
				book = 1 + rng.Int64N(2*sp.Period+1)
			case 2:
				book = sp.MaxDelay()
			case 3: // the slot's own distance, or one µs either side
				if gap := st.Expire - now; gap > 0 && gap <= sp.maxGap {
					over := gap*sp.Q - st.V - sp.Full + max(cost, 1)*sp.T
					book = max((over+sp.Q-1)/sp.Q+rng.Int64N(3)-1, 0)
				}
			}
			want, got := st, st
			var wo, o Outcome
			sp.bucketRef(&want, &wo, now, cost, book)
			sp.bucket(&got, &o, now, cost, book)
			if want != got || wo != o {
				t.Fatalf("%+v state %+v at %d cost %d book %d:\nwant %+v %+v\ngot  %+v %+v", l, st, now, cost, book, want, wo, got, o)
			}
		}
	}
}

// SetResult writes every field of the Result, whatever it held: the same
// Result as Result, over a Result whose every field was set.
func TestSetResultWritesEveryField(t *testing.T) {
	sp := MustCompile(core.Limit{Algorithm: core.GCRA, Rate: 7, Period: 3 * time.Second})
	lim := core.PerHour(1)
	for _, o := range []Outcome{
		{},
		{Allowed: true, Remaining: 3, Reset: 5, State: core.Warning, Previous: core.Normal, At: 9},
		{Retry: -1, Reset: 1 << 40, State: core.Throttled, Previous: core.Throttled, At: 1},
		{Retry: Micros(12), Reset: Micros(1 << 50)},
	} {
		var r core.Result
		v := reflect.ValueOf(&r).Elem()
		for i := range v.NumField() {
			switch f := v.Field(i); f.Kind() {
			case reflect.Bool:
				f.SetBool(true)
			case reflect.Int64:
				f.SetInt(-7)
			case reflect.Uint8, reflect.Uint64:
				f.SetUint(3)
			case reflect.Pointer:
				f.Set(reflect.ValueOf(&lim))
			default:
				t.Fatalf("field %s of kind %s: set it here", v.Type().Field(i).Name, f.Kind())
			}
		}
		sp.SetResult(&r, &o)
		if want := sp.Result(&o); r != want {
			t.Fatalf("SetResult(%+v) = %+v, want %+v", o, r, want)
		}
	}
}
