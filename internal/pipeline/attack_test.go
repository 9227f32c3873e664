//go:build go1.25

package pipeline_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/pipeline"
)

// notSent fails t if a pipeline of k carried id.
func notSent(t *testing.T, k *backend, id int) {
	t.Helper()
	for _, ids := range k.sent() {
		require.NotContains(t, ids, id, "call %d was sent", id)
	}
}

// A call whose deadline has passed when its pipeline is formed is never
// sent, even before the watchdog has run to expire it: sent to a stalled
// backend it would run there once the backend resumes, while its caller,
// expired by the watchdog in flight, reports it failed.
func TestCallDueBeforeItsPipelineIsNeverSent(t *testing.T) {
	for _, how := range []string{"enqueue", "wait", "lead"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				defer outlastSenders()
				k := newBackend() // stalled: a partition, the connection hangs
				defer close(k.hold)
				b := pipeline.New(k.send, pipeline.Options{Slots: 2, MaxBatch: 100, MaxWait: time.Hour})
				due := newCall(1, time.Now()) // due now: its deadline has passed
				live := newCall(2, time.Now().Add(time.Minute))
				var err error
				switch how {
				case "enqueue":
					b.Enqueue(due, live)
					err = due.Await(t.Context())
				case "wait": // finding the second slot free
					b.Enqueue(live)
					err = b.Wait(t.Context(), due)
				case "lead":
					require.True(t, b.Acquire())
					b.Enqueue(live)
					err = b.Lead(t.Context(), due)
				}
				require.ErrorIs(t, err, context.DeadlineExceeded)
				synctest.Wait()
				notSent(t, k, 1)
				p, n := b.Stats()
				require.Equal(t, [2]uint64{1, 1}, [2]uint64{p, n}, "pipelines and calls sent: call 2's")
			})
		})
	}
}

// A call whose caller's context ends after its pipeline was formed but
// before it is sent (while the sender is on its way) is not sent, even
// when the caller's goroutine has not run yet to abandon it: sent to a
// stalled backend it would run there once the backend resumes, while its
// caller reports its context's error. On one processor, readying another
// goroutine after the cancel puts the caller behind the sender in the run
// queue, as a loaded machine may.
func TestCallEndedBeforeItsPipelineIsSentIsNeverSent(t *testing.T) {
	for range 20 { // -race shuffles the run queue: try often
		synctest.Test(t, func(t *testing.T) {
			defer outlastSenders()
			k := newBackend() // stalled
			defer close(k.hold)
			b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100, MaxWait: time.Hour})
			release := leader(t, b)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- b.Wait(ctx, newCall(1, time.Time{})) }()
			poke := make(chan struct{})
			go func() { <-poke }()
			synctest.Wait() // queued
			procs := runtime.GOMAXPROCS(1)
			release() // forms the pipeline of call 1 and readies the sender
			cancel()  // readies the caller
			poke <- struct{}{}
			runtime.GOMAXPROCS(procs)
			require.ErrorIs(t, <-errc, context.Canceled)
			synctest.Wait()
			notSent(t, k, 1)
		})
	}
}

// liveSenders counts the goroutines of the caller's synctest bubble that
// run a Batcher's sender.
func liveSenders() int {
	own := make([]byte, 256)
	own = own[:runtime.Stack(own, false)]
	header, _, _ := strings.Cut(string(own), "\n")
	_, bubble, ok := strings.Cut(header, "synctest bubble ")
	if !ok {
		panic("liveSenders: not in a synctest bubble")
	}
	bubble = "synctest bubble " + strings.TrimSuffix(bubble, "]:")
	buf := make([]byte, 1<<20)
	for runtime.Stack(buf, true) == len(buf) {
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if (strings.Contains(header, bubble+"]") || strings.Contains(header, bubble+",")) && strings.Contains(g, "pipeline.(*Batcher[...]).sender(") {
			n++
		}
	}
	return n
}

// A pipeline handed to the sender just before, exactly as, or just after
// its SenderIdle ends (the sender parking or exiting while a new pipeline
// arrives) is sent, once, by the parked sender or a new one, never by both
// nor by none; no more senders than slots ever live; and none is left once
// idle.
func TestSenderExitRacesANewPipeline(t *testing.T) {
	const idle = 10 * time.Millisecond
	for _, off := range []time.Duration{-time.Nanosecond, 0, time.Nanosecond} {
		t.Run(off.String(), func(t *testing.T) {
			for range 8 {
				synctest.Test(t, func(t *testing.T) {
					k := newBackend()
					close(k.hold)
					b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 8, SenderIdle: idle})
					const rounds = 5
					for r := range rounds {
						c := newCall(r, time.Time{})
						if r%2 == 0 {
							b.Enqueue(c) // on the free slot: to a sender at once
							require.NoError(t, c.Await(t.Context()))
						} else {
							release := leader(t, b)
							go release() // the queue goes to a sender as Wait queues
							require.NoError(t, b.Wait(t.Context(), c))
						}
						require.Equal(t, 2*r, c.res)
						synctest.Wait() // a sender that was exiting as the call came has exited
						require.Equal(t, 1, liveSenders(), "one sender, parked")
						time.Sleep(idle + off)
					}
					require.Len(t, k.sent(), rounds)
					switch {
					case off < 0:
						require.Equal(t, uint64(1), b.Senders(), "parked all along")
					case off > 0:
						require.Equal(t, uint64(rounds), b.Senders(), "exited each time")
					}
					time.Sleep(idle)
					synctest.Wait()
					require.Zero(t, liveSenders(), "a sender outlived SenderIdle")
					require.True(t, b.Acquire(), "the slot is free")
				})
			}
		})
	}
}

// Calls queued together for one caller (EnqueueContext) and awaited in
// turn: once the caller's context ends, none of them is sent, not only
// the one whose Await noticed (to a stalled backend the others would run
// there while their Awaits, called next, report the context's error).
func TestEnqueuedCallsLeaveWithTheirContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer outlastSenders()
		k := newBackend() // stalled
		defer close(k.hold)
		b := pipeline.New(k.send, pipeline.Options{Slots: 1, MaxBatch: 100, MaxWait: time.Hour})
		release := leader(t, b)
		ctx, cancel := context.WithCancel(t.Context())
		calls := []*tcall{newCall(1, time.Time{}), newCall(2, time.Time{}), newCall(3, time.Time{})}
		b.EnqueueContext(ctx, calls...)
		cancel()
		require.ErrorIs(t, calls[0].Await(ctx), context.Canceled)
		release() // the queue would go now
		synctest.Wait()
		for _, c := range calls {
			require.ErrorIs(t, c.Await(ctx), context.Canceled, "call %d", c.id)
			notSent(t, k, c.id)
		}
		require.True(t, b.Acquire(), "the slot is free")
	})
}
