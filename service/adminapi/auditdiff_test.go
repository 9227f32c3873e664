package adminapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// GET /api/v1/audit gives each entry's changes member by member (a
// creation without before, a removal without after, an update only what
// differs) and filters by action, exactly or by a prefix ending in ".".
func TestAuditChangesAndAction(t *testing.T) { onEach(t, testAuditChangesAndAction) }

func testAuditChangesAndAction(t *testing.T, e *env) {
	require.Equal(t, http.StatusCreated, e.req("POST", "/api/v1/rules", ordersRule).status)
	updated := `{"id":"orders","name":"Orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":2,"window_seconds":60,"algorithm":"fixed_window"}`
	require.Equal(t, http.StatusOK, e.req("PUT", "/api/v1/rules/orders", updated, "If-Match", e.etag(1)).status)
	require.Equal(t, http.StatusNoContent, e.req("DELETE", "/api/v1/rules/orders", "", "If-Match", e.etag(2)).status)

	type change struct {
		Field  string          `json:"field"`
		Before json.RawMessage `json:"before"`
		After  json.RawMessage `json:"after"`
	}
	list := func(query string) []struct {
		Action  string   `json:"action"`
		Changes []change `json:"changes"`
	} {
		t.Helper()
		r := e.req("GET", "/api/v1/audit?"+query, "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		var out struct {
			Entries []struct {
				Action  string   `json:"action"`
				Changes []change `json:"changes"`
			} `json:"entries"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.raw), &out))
		return out.Entries
	}
	up := list("action=rule.update")
	require.Len(t, up, 1)
	var fields []string
	for _, c := range up[0].Changes {
		fields = append(fields, c.Field)
		if c.Field == "limit" {
			require.JSONEq(t, "5", string(c.Before))
			require.JSONEq(t, "2", string(c.After))
		}
	}
	require.Equal(t, []string{"limit", "etag", "revision", "updated_at"}, fields)

	all := list("action=" + url.QueryEscape("rule."))
	require.Len(t, all, 3)
	require.Equal(t, "rule.create", all[0].Action)
	for _, c := range all[0].Changes {
		require.Nil(t, c.Before, "a creation has nothing before: %s", c.Field)
		require.NotNil(t, c.After)
	}
	require.Equal(t, "rule.delete", all[2].Action)
	for _, c := range all[2].Changes {
		require.NotNil(t, c.Before)
		require.Nil(t, c.After, "a removal has nothing after: %s", c.Field)
	}
	require.Empty(t, list("action=rule"), "an exact action, not a prefix")
	require.Empty(t, list("action=tier."))
	requireProblem(t, e.req("GET", "/api/v1/audit?action=%00", ""), http.StatusBadRequest, "action")
}

// GET /api/v1/rules searches as the admin page does: an ID or endpoint
// pattern holding the text, a name holding it in any case; control
// characters are refused naming the parameter.
func TestListRulesSearch(t *testing.T) { onEach(t, testListRulesSearch) }

func testListRulesSearch(t *testing.T, e *env) {
	require.Equal(t, http.StatusCreated, e.req("POST", "/api/v1/rules", ordersRule).status)
	other := `{"id":"search","name":"Search API","dimension":"user","endpoint_pattern":"/api/search","limit":5,"window_seconds":60,"algorithm":"gcra"}`
	require.Equal(t, http.StatusCreated, e.req("POST", "/api/v1/rules", other).status)
	ids := func(query string) []string {
		t.Helper()
		r := e.req("GET", "/api/v1/rules?"+query, "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		var out struct {
			Rules []struct {
				ID string `json:"id"`
			} `json:"rules"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.raw), &out))
		var got []string
		for _, rl := range out.Rules {
			got = append(got, rl.ID)
		}
		return got
	}
	require.Equal(t, []string{"search"}, ids("name=search+api"))
	require.Equal(t, []string{"orders"}, ids("endpoint=orders"))
	require.Equal(t, []string{"orders"}, ids("id=rde"))
	require.Empty(t, ids("id=RDE"))
	require.Equal(t, []string{"orders", "search"}, ids("name=&id="))
	requireProblem(t, e.req("GET", "/api/v1/rules?name=%01", ""), http.StatusBadRequest, "name")
}
