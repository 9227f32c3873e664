package pipeline_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pipeline"
)

// bcall is a call of the benchmark.
type bcall struct {
	pipeline.Call
	id, res int
}

// BenchmarkQueued64Callers measures the Batcher's own cost per call: 64
// callers on one slot, each call due in a second (as a store's), on a
// backend that answers at once after yielding (a round trip's turn).
//
//	go test ./internal/pipeline -run XXX -bench Queued64Callers -cpu 1
func BenchmarkQueued64Callers(b *testing.B) {
	send := func(_ context.Context, batch []*bcall) {
		runtime.Gosched()
		for _, c := range batch {
			c.res = 2 * c.id
		}
	}
	bt := pipeline.New(send, pipeline.Options{Slots: 1, MaxBatch: 256})
	ctx := context.Background()
	var wg sync.WaitGroup
	per := b.N / 64
	b.ResetTimer()
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &bcall{}
			for i := range per {
				c.id = g*per + i
				c.Init(time.Now().Add(time.Second))
				var err error
				switch {
				case !bt.Acquire():
					err = bt.Wait(ctx, c)
				case !bt.Alone():
					err = bt.Lead(ctx, c)
				default:
					send(ctx, []*bcall{c})
					c.Settle()
					bt.Release()
				}
				if err != nil || c.res != 2*c.id {
					b.Error("call", c.id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
