package rulesdb

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Import is one transaction: a file whose third rule conflicts with the
// first writes nothing at all; a good one writes every rule, each with its
// revision and audit row.
func TestImportAllOrNothing(t *testing.T) { each(t, testImportAllOrNothing) }

func testImportAllOrNothing(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	_, err := d.Create(ctx, "alice", sample("existing"))
	require.NoError(t, err)
	a, b, c := sample("a"), sample("b"), sample("c")
	a.EndpointPattern, b.EndpointPattern = "/a/**", "/b/**"
	c.EndpointPattern = "/a/**" // the same dimension and pattern as a, no tier
	n, err := d.Import(ctx, "ops", []Rule{a, b, c})
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "endpoint_pattern")
	require.Zero(t, n)
	all, err := d.All(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1, "nothing of the refused file is stored")
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, rev)
	log, err := d.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, log, 1)

	// A rule refused alone names its index.
	bad := sample("bad")
	bad.Algorithm = "magic"
	_, err = d.Import(ctx, "ops", []Rule{a, b, bad})
	require.ErrorContains(t, err, "rules[2]")
	require.ErrorContains(t, err, "algorithm")
	_, err = d.Import(ctx, "ops", []Rule{a, a})
	require.ErrorContains(t, err, "rules[1].id: ")

	// Tier rows may come before their base: the set is checked whole.
	gold := sample("a-gold")
	gold.EndpointPattern, gold.Tier, gold.Limit = "/a/**", "gold", 1000
	upd := sample("existing")
	upd.Limit = 42
	n, err = d.Import(ctx, "ops", []Rule{gold, a, b, upd})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	rev, err = d.Revision(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, rev)
	log, err = d.Audit(ctx, 1, 100)
	require.NoError(t, err)
	require.Len(t, log, 4)
	require.Equal(t, "rule.create", log[0].Action)
	require.Equal(t, "rule.update", log[3].Action)
	require.Equal(t, "rule/existing", log[3].Target)
	got, err := d.Get(ctx, "existing")
	require.NoError(t, err)
	require.EqualValues(t, 42, got.Limit)
	require.Equal(t, `"5"`, got.ETag)
	snap, err := d.Source(0).Load(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1000, snap.Match("", "user", "/a/x")[0].Tiers["gold"].Rate)
}
