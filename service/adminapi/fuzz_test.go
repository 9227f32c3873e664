package adminapi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// FuzzRuleBody: whatever the body, decoding and checking it never panics;
// a rule it accepts is one the database accepts alone, and a refusal names
// a field.
func FuzzRuleBody(f *testing.F) {
	f.Add([]byte(ordersRule))
	f.Add([]byte(`{"id":"a","dimension":"user","limit":1,"window_seconds":1,"algorithm":"token_bucket","burst":5,"tier":"gold"}`))
	f.Add([]byte(`{"id":"a","dimension":"user","limit":70000,"window_seconds":1,"algorithm":"sliding_window_log"}`))
	f.Add([]byte(`{"id":"a","dimension":"ip","endpoint_pattern":"/a/*/b/**","limit":9,"window_seconds":3153600000,"algorithm":"sliding_window_counter"}`))
	f.Add([]byte(`{"id":"a","id":"b"}`))
	f.Add([]byte(`[1]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var b ruleBody
		if e := decodeJSON(body, &b); e != nil {
			require.NotEmpty(t, e.fields)
			return
		}
		r, e := b.rule("")
		if e != nil {
			require.NotEmpty(t, e.fields)
			require.NotEmpty(t, e.fields[0].Field)
			return
		}
		require.NoError(t, rulesdb.ValidateRule(r), "accepted by the API, refused by the database")
	})
}
