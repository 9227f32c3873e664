package rulesdb

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An endpoint pattern longer than MaxEndpointPattern is refused naming
// the field on both backends, and writes nothing: PostgreSQL could not
// index it (rules_related, migration 4: a B-tree entry is at most about
// 2.7 kB), and the engine never matches an endpoint that long.
func TestLongEndpointPatternRefused(t *testing.T) { each(t, testLongEndpointPatternRefused) }

func testLongEndpointPatternRefused(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < 3000 {
		fmt.Fprintf(&b, "/%x", rng.Uint64()) // incompressible
	}
	r := sample("a")
	r.EndpointPattern = b.String()
	_, err := d.Create(ctx, "t", r)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "endpoint_pattern")
	_, err = d.Import(ctx, "t", []Rule{r})
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "endpoint_pattern")
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	require.Zero(t, rev)

	r.EndpointPattern = b.String()[:MaxEndpointPattern]
	r.EndpointPattern = strings.TrimRight(r.EndpointPattern, "/")
	_, err = d.Create(ctx, "t", r)
	require.NoError(t, err)
}

// A tier assignment's identifier over MaxOverrideIdentifier bytes is
// refused naming identifier on both backends, and writes nothing
// (PostgreSQL could not index a much longer one in user_tiers' key).
func TestLongTierIdentifierRefused(t *testing.T) { each(t, testLongTierIdentifierRefused) }

func testLongTierIdentifierRefused(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	rng := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	for b.Len() < 3000 {
		fmt.Fprintf(&b, "%x", rng.Uint64())
	}
	_, err := d.SetTier(ctx, "t", "user", b.String(), "gold")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "identifier")
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	require.Zero(t, rev)
	_, err = d.SetTier(ctx, "t", "user", b.String()[:MaxOverrideIdentifier], "gold")
	require.NoError(t, err)
}
