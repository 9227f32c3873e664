//go:build go1.25

package pipeline_test

import (
	"context"
	"runtime"
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
