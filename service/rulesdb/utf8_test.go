package rulesdb

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/rawtext/rawtexttest"
)

// The store refuses text that is not valid UTF-8 wherever a caller gives
// it (not only the admin API, which refuses it first): ReadRules names the
// rule and field before decoding; a rule's strings, a tier, an override's
// identifier, an actor and an audit target are ErrInvalid (or refused) on
// SQLite and PostgreSQL alike, and nothing is written.
func TestInvalidUTF8NeverStored(t *testing.T) { each(t, testInvalidUTF8NeverStored) }

func testInvalidUTF8NeverStored(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	for _, s := range rawtexttest.Invalid {
		for _, field := range []string{"id", "name", "dimension", "endpoint_pattern", "algorithm", "tier"} {
			r := sample("ok")
			switch field {
			case "id":
				r.ID = "ok" + s.Bytes
			case "name":
				r.Name += s.Bytes
			case "dimension":
				r.Dimension += s.Bytes
			case "endpoint_pattern":
				r.EndpointPattern += s.Bytes
			case "algorithm":
				r.Algorithm += s.Bytes
			case "tier":
				r.Tier = "gold" + s.Bytes
			}
			_, err := d.Create(ctx, "ops", r)
			require.ErrorIs(t, err, ErrInvalid, "%s in %s", s.Name, field)
			require.Contains(t, err.Error(), field, "%s in %s", s.Name, field)
			_, err = d.Import(ctx, "ops", []Rule{r})
			require.ErrorIs(t, err, ErrInvalid, "%s in %s", s.Name, field)
		}
		_, err := d.SetTier(ctx, "ops", "user", "alice", "gold"+s.Bytes)
		require.ErrorIs(t, err, ErrInvalid, s.Name)
		_, err = d.SetTier(ctx, "ops", "user", "alice"+s.Bytes, "gold")
		require.ErrorIs(t, err, ErrInvalid, s.Name)
		_, err = d.Create(ctx, "ops"+s.Bytes, sample("ok"))
		require.Error(t, err, "%s in the actor", s.Name)
		require.Contains(t, err.Error(), "actor")
		err = d.Record(ctx, "ops", ActionStoreReset, "store/"+s.Bytes, nil, nil, func(context.Context) error { return errors.New("must not run") })
		require.Error(t, err, s.Name)
		require.Contains(t, err.Error(), "target")
	}
	_, err := d.Create(ctx, "ops", sample("orders"))
	require.NoError(t, err)
	for _, s := range rawtexttest.Invalid {
		_, err := d.SetOverride(ctx, "ops", Override{Dimension: "user", Identifier: "al" + s.Bytes, RuleID: "orders", Block: true, ExpiresAt: time.Now().Add(time.Hour)})
		require.ErrorIs(t, err, ErrInvalid, s.Name)
	}
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, rev, "only the valid rule was written")
}

// ReadRules names the rule and the field of text that is not valid UTF-8,
// for every invalid sequence and unpaired surrogate escape.
func TestReadRulesRefusesInvalidUTF8(t *testing.T) {
	for _, s := range append(append([]rawtexttest.Sample{}, rawtexttest.Invalid...), rawtexttest.Escapes...) {
		for _, field := range []string{"id", "name", "dimension", "endpoint_pattern", "algorithm", "tier"} {
			body := `[{"id":"a"},{"id":"b","` + field + `2":1,"` + field + `":"x` + s.Bytes + `"}]`
			if field == "id" {
				body = `[{"id":"a"},{"id":"x` + s.Bytes + `"}]`
			}
			_, err := ReadRules(bytes.NewReader([]byte(body)))
			require.ErrorIs(t, err, ErrInvalid, "%s in %s", s.Name, field)
			require.True(t, strings.Contains(err.Error(), "rules[1]."+field+": "), "%s in %s: %v", s.Name, field, err)
		}
	}
}
