package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
)

// heldStore is a real store whose Takes wait, once hold is set, until
// release is closed (entered says one is waiting), or fail with err.
type heldStore struct {
	core.Store
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
	err     error
}

func (h *heldStore) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	if h.err != nil {
		return h.err
	}
	if h.hold.Load() {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.Store.Take(ctx, ops, out)
}

// One Usage at a time: a second waits for the first, or for its context,
// and then fails naming usage and the context's error.
func TestUsageWaitsForTheOneBefore(t *testing.T) {
	st := &heldStore{Store: memStore(t), entered: make(chan struct{}), release: make(chan struct{})}
	e, err := engine.New(context.Background(), st, newSource(overrideSnap(t, "1")))
	require.NoError(t, err)
	st.hold.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := e.Usage(context.Background(), "user", "ann")
		first <- err
	}()
	<-st.entered // the first holds the store
	st.hold.Store(false)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	us, err := e.Usage(ctx, "user", "bob")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "engine: usage: ")
	require.Nil(t, us)

	close(st.release)
	require.NoError(t, <-first)
	us, err = e.Usage(context.Background(), "user", "bob")
	require.NoError(t, err, "the first let go")
	require.Len(t, us, 2)
}

// A store failure is Usage's error, wrapping the store's.
func TestUsageStoreFailure(t *testing.T) {
	down := errors.New("store down")
	st := &heldStore{Store: memStore(t)}
	e, err := engine.New(context.Background(), st, newSource(overrideSnap(t, "1")))
	require.NoError(t, err)
	st.err = down
	us, err := e.Usage(context.Background(), "user", "ann")
	require.ErrorIs(t, err, down)
	require.ErrorContains(t, err, "engine: usage: ")
	require.Nil(t, us)
	st.err = nil
	_, err = e.Usage(context.Background(), "user", "ann")
	require.NoError(t, err, "the failed one let go")
}
