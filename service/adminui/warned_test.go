package adminui

import (
	"context"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/engine"
)

// TestRulesTableCountsWarnedCallersLaterThrottled: a caller warned (checks
// 9 and 10 of 10) and then throttled (11) counts in both the Warned and the
// Throttled column; one only warned, in Warned alone.
func TestRulesTableCountsWarnedCallersLaterThrottled(t *testing.T) {
	s := newStack(t)
	for i, n := range map[string]int{"ann": 11, "bob": 9, "cid": 3} {
		for range n {
			_, err := s.eng.Check(context.Background(), engine.Check{Dimension: "user", Identifier: i, Endpoint: "/api/orders/1", Cost: 1})
			require.NoError(t, err)
		}
	}
	c := s.client()
	c.login(s.read)
	r := c.get("/admin/")
	require.Equal(t, http.StatusOK, r.status)
	row := regexp.MustCompile(`(?s)<tr data-rule="orders">.*?</tr>`).FindString(r.body)
	require.Contains(t, row, `<td class="num warned">2</td>`, "ann and bob were warned")
	require.Contains(t, row, `<td class="num throttled">1</td>`, "ann was throttled")
}
