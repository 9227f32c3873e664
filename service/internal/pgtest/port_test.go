//go:build unix

package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestPortTaken checks that a server launched on a port another server
// already holds is reported as not started (Start then retries on another
// port), rather than mistaken for ready, and that the other server is left
// alone.
func TestPortTaken(t *testing.T) {
	t.Parallel()
	a := Start(t)
	b := Start(t)
	b.Kill()
	b.port = a.port
	err := b.launch()
	require.Error(t, err)
	require.False(t, b.Running())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, a.DSN())
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	require.NoError(t, conn.Ping(ctx))
}
