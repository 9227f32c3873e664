package adminapi

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

var nextLinkRE = regexp.MustCompile(`^<([^>]+)>; rel="next"$`)

// TestListPagesWithConcurrentInserts pages through the rules, following
// the Link header, while another client inserts rules: no rule comes
// twice, and every rule that existed throughout comes once.
func TestListPagesWithConcurrentInserts(t *testing.T) { onEach(t, testListPagesWithConcurrentInserts) }

func testListPagesWithConcurrentInserts(t *testing.T, e *env) {
	initial := map[string]bool{}
	for i := range 120 {
		id := fmt.Sprintf("p%03d", i*2)
		r := rulesdb.Rule{ID: id, Dimension: "user", EndpointPattern: "/api/" + id, Limit: 10, WindowSeconds: 60, Algorithm: "gcra", Enabled: true}
		_, err := e.db.Create(e.ctx, "seed", r)
		require.NoError(t, err)
		initial[id] = true
	}
	ctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	var inserted atomic.Int64
	wg.Go(func() {
		for i := 0; ctx.Err() == nil && i < 120; i++ {
			// Odd ids, scattered: some land in the pages already read,
			// some in those to come.
			id := fmt.Sprintf("p%03d", (i*37%120)*2+1)
			r := e.req("POST", "/api/v1/rules", fmt.Sprintf(`{"id":%q,"dimension":"user","endpoint_pattern":"/api/%s","limit":1,"window_seconds":1,"algorithm":"gcra"}`, id, id))
			if r.status != http.StatusCreated {
				return
			}
			inserted.Add(1)
		}
	})
	seen := map[string]int{}
	path := "/api/v1/rules?limit=17"
	pages := 0
	for path != "" {
		pages++
		require.Less(t, pages, 40)
		// Pages and inserts interleave: at least 3 inserts between pages.
		eventually(t, func() bool { return inserted.Load() >= int64(min(3*pages, 120)) }, "inserts go on")
		r := e.req("GET", path, "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		for _, x := range r.body["rules"].([]any) {
			seen[x.(map[string]any)["id"].(string)]++
		}
		next := r.body["next_cursor"].(string)
		link := r.header.Get("Link")
		if next == "" {
			require.Empty(t, link)
			path = ""
			continue
		}
		m := nextLinkRE.FindStringSubmatch(link)
		require.NotNil(t, m, link)
		require.Contains(t, m[1], "cursor="+next)
		require.Contains(t, m[1], "limit=17")
		path = m[1]
	}
	stop()
	wg.Wait()
	t.Logf("%d pages, %d rules seen, %d inserted while paging", pages, len(seen), inserted.Load())
	for id, n := range seen {
		require.Equal(t, 1, n, "rule %s listed %d times", id, n)
	}
	require.Greater(t, len(seen), len(initial), "some rules inserted while paging are listed")
	require.Less(t, len(seen), len(initial)+int(inserted.Load()), "some rules inserted while paging were behind the cursor")
	for id := range initial {
		require.Contains(t, seen, id, "rule %s existed throughout and was skipped", id)
	}
}

func TestListFilters(t *testing.T) { onEach(t, testListFilters) }

func testListFilters(t *testing.T, e *env) {
	for _, b := range []string{
		`{"id":"a","dimension":"user","endpoint_pattern":"/a","limit":1,"window_seconds":1,"algorithm":"gcra"}`,
		`{"id":"a-gold","dimension":"user","endpoint_pattern":"/a","limit":5,"window_seconds":1,"algorithm":"gcra","tier":"gold"}`,
		`{"id":"b","dimension":"ip","endpoint_pattern":"/b","limit":1,"window_seconds":1,"algorithm":"fixed_window","enabled":false}`,
		`{"id":"c","dimension":"ip","endpoint_pattern":"/c","limit":1,"window_seconds":1,"algorithm":"gcra","shadow":true}`,
	} {
		r := e.req("POST", "/api/v1/rules", b)
		require.Equal(t, http.StatusCreated, r.status, r.raw)
	}
	ids := func(q string) string {
		r := e.req("GET", "/api/v1/rules"+q, "")
		require.Equal(t, http.StatusOK, r.status, r.raw)
		var out []string
		for _, x := range r.body["rules"].([]any) {
			out = append(out, x.(map[string]any)["id"].(string))
		}
		return strings.Join(out, ",")
	}
	require.Equal(t, "a,a-gold,b,c", ids(""))
	require.Equal(t, "b,c", ids("?dimension=ip"))
	require.Equal(t, "a-gold", ids("?tier=gold"))
	require.Equal(t, "a,a-gold,c", ids("?algorithm=gcra"))
	require.Equal(t, "b", ids("?enabled=false"))
	require.Equal(t, "c", ids("?enabled=true&dimension=ip"))
	require.Equal(t, "", ids("?dimension=api_key"))
	r := e.req("GET", "/api/v1/rules?dimension=api_key", "")
	require.Equal(t, `{"rules":[],"next_cursor":""}`+"\n", r.raw)
	// A filter's pages: the cursor carries the position, the query the filter.
	r = e.req("GET", "/api/v1/rules?algorithm=gcra&limit=2", "")
	require.Len(t, r.body["rules"], 2)
	m := nextLinkRE.FindStringSubmatch(r.header.Get("Link"))
	require.NotNil(t, m)
	require.Contains(t, m[1], "algorithm=gcra")
	r = e.req("GET", m[1], "")
	require.Len(t, r.body["rules"], 1)
	require.Equal(t, "c", r.body["rules"].([]any)[0].(map[string]any)["id"])
	require.Equal(t, "", r.body["next_cursor"])
}
