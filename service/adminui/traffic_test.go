package adminui

import (
	"context"
	"encoding/xml"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/traffic"
)

// svgDoc is the part of a chart's SVG the tests read.
type svgDoc struct {
	ID    string    `xml:"id,attr"`
	YMax  int64     `xml:"data-ymax,attr"`
	Bars  []svgBars `xml:"g"`
	Rects []svgRect `xml:"rect"`
}

type svgBars struct {
	Outcome string    `xml:"data-outcome,attr"`
	Rects   []svgRect `xml:"rect"`
}

type svgRect struct {
	Period int     `xml:"data-period,attr"`
	X      float64 `xml:"x,attr"`
	Y      float64 `xml:"y,attr"`
	W      float64 `xml:"width,attr"`
	H      float64 `xml:"height,attr"`
	Title  string  `xml:"title"`
}

// chartOf parses the SVG chart id of page.
func chartOf(t *testing.T, page, id string) svgDoc {
	t.Helper()
	m := regexp.MustCompile(`(?s)<svg id="` + regexp.QuoteMeta(id) + `".*?</svg>`).FindString(page)
	require.NotEmpty(t, m, "no chart %s", id)
	var d svgDoc
	require.NoError(t, xml.Unmarshal([]byte(m), &d), "the chart is well-formed XML")
	return d
}

// requireBars checks that d draws want: for each period with counts, a bar
// in the period's slot, its outcomes stacked from the axis in order, each
// segment as tall as its count on an axis from 0 to d.YMax (parsed back to
// the count, to a hundredth of a unit); no segment for a zero count.
func requireBars(t *testing.T, d svgDoc, want []traffic.Counts) {
	t.Helper()
	require.Len(t, d.Bars, int(traffic.NumOutcomes), d.ID)
	slot := float64(chartPlotW) / float64(len(want))
	top := make([]float64, len(want)) // the top of each bar so far
	for i := range top {
		top[i] = chartTop + chartPlotH
	}
	got := make([]traffic.Counts, len(want))
	for o, b := range d.Bars {
		require.Equal(t, traffic.Outcome(o).String(), b.Outcome)
		for _, r := range b.Rects {
			i := r.Period
			require.InDelta(t, chartLeft+float64(i)*slot, r.X-slot*0.12, 0.01, "%s %s x of %d", d.ID, b.Outcome, i)
			require.InDelta(t, top[i], r.Y+r.H, 0.01, "%s %s of %d stacked on the one below", d.ID, b.Outcome, i)
			top[i] = r.Y
			count := r.H / chartPlotH * float64(d.YMax)
			require.InDelta(t, math.Round(count), count, 0.01, "%s %s of %d: a whole count", d.ID, b.Outcome, i)
			got[i][o] = int64(math.Round(count))
		}
	}
	require.Equal(t, want, got, d.ID)
}

// TestTrafficCharts: checks through the engine, one sampler tick, and the
// traffic pages' SVG charts place every count where it belongs (each point
// parsed back to its count), the tables count them, the throttled caller
// is listed, and the page holds no script and no style attribute.
func TestTrafficCharts(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	checks := func(u string, n int) {
		for range n {
			_, err := s.eng.Check(ctx, engine.Check{Dimension: "user", Identifier: u, Endpoint: "/api/orders/1", Cost: 1})
			require.NoError(t, err)
		}
	}
	at := time.Now().Truncate(time.Second).Add(2*time.Second + 5*time.Millisecond)
	checks("ann", 11)                // 8 allowed, 2 warned, 1 denied
	s.rec.Tick(at.Add(-time.Second)) // into the second two before at's
	checks("bob", 5)
	s.rec.Tick(at) // into the second before at's
	s.h.now = func() time.Time { return at }
	c := s.client()
	c.login(s.read)

	ann, bob, orders := traffic.Counts{8, 2, 0, 1}, traffic.Counts{5, 0, 0, 0}, traffic.Counts{13, 2, 0, 1}
	secs, mins := make([]traffic.Counts, 60), make([]traffic.Counts, 60)
	secs[58], secs[59] = ann, bob
	if last := at.Add(-time.Second).Truncate(time.Minute); last.Equal(at.Add(-2 * time.Second).Truncate(time.Minute)) {
		mins[59] = orders
	} else { // the two seconds straddle a minute
		mins[58], mins[59] = ann, bob
	}
	for _, p := range []string{"/admin/traffic", "/admin/traffic/orders"} {
		r := c.get(p)
		require.Equal(t, http.StatusOK, r.status, r.body)
		low := strings.ToLower(r.body)
		require.NotContains(t, low, "<script")
		require.NotContains(t, low, " style=")
		require.Contains(t, r.header.Get("Content-Security-Policy"), "default-src 'none'")
		id := "instance"
		if strings.HasSuffix(p, "orders") {
			id = "rule"
		}
		sec := chartOf(t, r.body, id+"-seconds")
		require.EqualValues(t, 20, sec.YMax)
		requireBars(t, sec, secs)
		require.Contains(t, sec.Rects[len(sec.Rects)-2].Title, "8 allowed, 2 warned, 0 shadow-denied, 1 denied", "the hover title of ann's second")
		requireBars(t, chartOf(t, r.body, id+"-minutes"), mins)
		require.Regexp(t, `<tr id="hour-here"><td>This instance</td><td class="num">13</td><td class="num">2</td><td class="num">0</td><td class="num">1</td></tr>`, r.body)
		require.Regexp(t, `(?s)<h2>Throttled now</h2>.*?<td class="num">1</td>`, r.body)
		require.Contains(t, r.body, `href="/admin/users?dimension=user&amp;id=ann"`)
		require.NotContains(t, r.body, `id=bob`, "bob was never denied")
		require.Contains(t, r.body, `id="fleet-none"`)
		require.Contains(t, r.body, "<dt>Throttled</dt>")
	}
	r := c.get("/admin/traffic")
	require.Regexp(t, `(?s)<tr data-rule="orders">.*?<td class="num">13</td><td class="num">2</td><td class="num">0</td><td class="num">1</td>\s*<td class="num">1</td>`, r.body, "the rule's hour and its caller throttled now")

	// A hostile rule ID in the path is text.
	r = c.get("/admin/traffic/" + url.PathEscape(hostile))
	require.Equal(t, http.StatusOK, r.status)
	require.NotContains(t, strings.ToLower(r.body), "<script")

	// A rule that saw nothing: no bars.
	r = c.get("/admin/traffic/none")
	require.Equal(t, http.StatusOK, r.status)
	requireBars(t, chartOf(t, r.body, "rule-seconds"), make([]traffic.Counts, 60))
	require.Contains(t, r.body, "no checks counted")
}

// TestTrafficFleetUnanswered: when Redis refuses the connection, or
// accepts it and never answers, the traffic page still answers, within the
// fleet's bound, with this instance's figures and says the fleet's are
// unavailable, without the error's text.
func TestTrafficFleetUnanswered(t *testing.T) {
	mute, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	require.NoError(t, err)
	t.Cleanup(func() { _ = mute.Close() })
	go func() {
		for {
			conn, err := mute.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := refused.Addr().String()
	require.NoError(t, refused.Close())
	for name, addr := range map[string]string{"refused": closed, "mute": mute.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			s := newStack(t)
			client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = client.Close() })
			s.h.traffic.fleet = traffic.NewFleet(client, "sluice", "here", s.rec, nil)
			c := s.client()
			c.login(s.read)
			start := time.Now()
			r := c.get("/admin/traffic")
			require.Less(t, time.Since(start), fleetTimeout+time.Second)
			require.Equal(t, http.StatusOK, r.status)
			require.Contains(t, r.body, `id="fleet-failed"`)
			require.Contains(t, r.body, `id="instance-minutes"`)
			require.NotContains(t, r.body, addr)
			require.NotContains(t, r.body, "refused")
			require.NotContains(t, r.body, "deadline")
		})
	}
}
