package adminapi

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAuditCompleteness makes 200 random admin writes (creates, updates,
// deletes, tiers, overrides, with failures mixed in) and checks that the
// audit holds exactly one row per successful change, in order, with its
// actor, action, target, before, after and revision, and none for a
// failure.
func TestAuditCompleteness(t *testing.T) { onEach(t, testAuditCompleteness) }

func testAuditCompleteness(t *testing.T, e *env) {
	rng := rand.New(rand.NewPCG(15, 200))
	type want struct {
		actor, action, target string
		before, after         any
		revision              int64 // 0: not known from the answer
		requestID             string
	}
	var wants []want
	rules := map[string]map[string]any{}     // id -> stored rule as answered
	tiers := map[string]string{}             // identifier -> tier
	overrides := map[string]map[string]any{} // identifier/rule -> override as answered
	decode := func(s string) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(s), &m), s)
		return m
	}
	ids := []string{"r0", "r1", "r2", "r3", "r4", "r5"}
	users := []string{"alice", "bob", "carol"}
	counts := map[string]int{}
	for i := range 200 {
		actor := []string{"ann", "ben", "cat"}[rng.IntN(3)]
		auth := e.auth(actor)
		if i%2 == 0 { // the caller's own request id, kept
			auth = append(auth, "X-Request-Id", fmt.Sprintf("req-%d", i))
		}
		id := ids[rng.IntN(len(ids))]
		user := users[rng.IntN(len(users))]
		body := func(limit int) string {
			return fmt.Sprintf(`{"id":%q,"dimension":"user","endpoint_pattern":"/api/%s/**","limit":%d,"window_seconds":60,"algorithm":"token_bucket","enabled":%t}`,
				id, id, limit, rng.IntN(5) > 0)
		}
		var r reply
		op := rng.IntN(7)
		switch op {
		case 0: // create (409 if it exists; sometimes invalid)
			limit := 1 + rng.IntN(100)
			if rng.IntN(8) == 0 {
				limit = 0
			}
			r = e.raw("POST", "/api/v1/rules", body(limit), append(auth, "Content-Type", "application/json")...)
			if r.status == http.StatusCreated {
				m := decode(r.raw)
				wants = append(wants, want{actor, "rule.create", "rule/" + id, nil, m, int64(m["revision"].(float64)), ""})
				rules[id] = m
			}
		case 1, 2: // update, with the current etag or a stale one
			etag := `"999"`
			if cur, ok := rules[id]; ok && rng.IntN(4) > 0 {
				etag = cur["etag"].(string)
			}
			r = e.raw("PUT", "/api/v1/rules/"+id, body(1+rng.IntN(100)), append(auth, "Content-Type", "application/json", "If-Match", etag)...)
			if r.status == http.StatusOK {
				m := decode(r.raw)
				wants = append(wants, want{actor, "rule.update", "rule/" + id, rules[id], m, int64(m["revision"].(float64)), ""})
				rules[id] = m
			}
		case 3: // delete
			etag := `"999"`
			if cur, ok := rules[id]; ok && rng.IntN(4) > 0 {
				etag = cur["etag"].(string)
			}
			r = e.raw("DELETE", "/api/v1/rules/"+id, "", append(auth, "If-Match", etag)...)
			if r.status == http.StatusNoContent {
				wants = append(wants, want{actor, "rule.delete", "rule/" + id, rules[id], nil, 0, ""})
				delete(rules, id)
				for _, u := range users {
					delete(overrides, u+"/"+id)
				}
			}
		case 4: // tier (an unchanged one writes nothing; a blank one fails)
			tier := []string{"", "gold", "silver", " "}[rng.IntN(4)]
			r = e.raw("PUT", "/api/v1/users/"+user+"/tier", fmt.Sprintf(`{"tier":%q}`, tier), append(auth, "Content-Type", "application/json")...)
			if r.status == http.StatusOK && tiers[user] != tier {
				var before, after any
				if cur := tiers[user]; cur != "" {
					before = map[string]any{"dimension": "user", "identifier": user, "tier": cur}
				}
				action := "tier.clear"
				if tier != "" {
					action = "tier.set"
					after = map[string]any{"dimension": "user", "identifier": user, "tier": tier}
				}
				wants = append(wants, want{actor, action, "tier/user/" + user, before, after, 0, ""})
				tiers[user] = tier
			}
		case 5: // override (fails for a missing or disabled rule)
			b := fmt.Sprintf(`{"rule_id":%q,"limit":%d,"window_seconds":60,"ttl_seconds":600}`, id, 1+rng.IntN(10))
			if rng.IntN(3) == 0 {
				b = fmt.Sprintf(`{"rule_id":%q,"block":true,"ttl_seconds":600}`, id)
			}
			r = e.raw("POST", "/api/v1/users/"+user+"/override", b, append(auth, "Content-Type", "application/json")...)
			if r.status == http.StatusCreated {
				m := decode(r.raw)
				var before any
				if cur, ok := overrides[user+"/"+id]; ok {
					before = cur
				}
				wants = append(wants, want{actor, "override.set", "override/user/" + user + "/" + id, before, m, int64(m["revision"].(float64)), ""})
				overrides[user+"/"+id] = m
			}
		case 6: // clear an override (404 when none)
			r = e.raw("DELETE", "/api/v1/users/"+user+"/override/"+id, "", auth...)
			if r.status == http.StatusNoContent {
				wants = append(wants, want{actor, "override.clear", "override/user/" + user + "/" + id, overrides[user+"/"+id], nil, 0, ""})
				delete(overrides, user+"/"+id)
			}
		}
		require.Less(t, r.status, 500, "write %d: %s", i, r.raw)
		require.NotEmpty(t, r.header.Get("X-Request-Id"))
		if len(wants) > 0 && wants[len(wants)-1].requestID == "" {
			wants[len(wants)-1].requestID = r.header.Get("X-Request-Id")
		}
		counts[fmt.Sprintf("%d %d", op, r.status/100)]++
	}
	t.Logf("op status-class counts: %v", counts)
	for _, k := range []string{"0 2", "0 4", "1 2", "1 4", "3 2", "3 4", "4 2", "4 4", "5 2", "5 4", "6 2", "6 4"} {
		require.NotZero(t, counts[k], "the sequence exercises op/status %s", k)
	}

	r := e.req("GET", "/api/v1/audit?limit=1000", "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	var got []any
	for _, g := range r.body["entries"].([]any) {
		if int64(g.(map[string]any)["revision"].(float64)) > e.base { // not the tokens' rows
			got = append(got, g)
		}
	}
	require.Equal(t, len(wants), len(got), "one audit row per successful write, none for a failure")
	rev, err := e.db.Revision(e.ctx)
	require.NoError(t, err)
	require.EqualValues(t, e.base+int64(len(wants)), rev, "every revision is one audited write")
	norm := func(v any) any {
		if v == nil {
			return nil
		}
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var out any
		require.NoError(t, json.Unmarshal(b, &out))
		return out
	}
	for i, w := range wants {
		g := got[i].(map[string]any)
		require.EqualValues(t, e.base+int64(i+1), g["revision"], "entry %d", i)
		if w.revision != 0 {
			require.EqualValues(t, w.revision, g["revision"], "entry %d", i)
		}
		require.Equal(t, w.actor, g["actor"], "entry %d", i)
		require.Equal(t, w.action, g["action"], "entry %d", i)
		require.Equal(t, w.target, g["target"], "entry %d", i)
		require.Equal(t, w.requestID, g["request_id"], "entry %d", i)
		require.Equal(t, norm(w.before), g["before"], "entry %d before", i)
		require.Equal(t, norm(w.after), g["after"], "entry %d after", i)
	}
}
