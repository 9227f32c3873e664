package accuracy

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"
)

// Markdown formats the report: the setup, the traces, the results table and
// the sliding window counter's estimate error, as Markdown.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Limit: **%d requests per %s** for every algorithm (Burst = Rate for the buckets), one key per client, cost 1 per request; seed %d, scale `%s`.\n\n",
		r.Limit.Rate, r.Limit.Period, r.Seed, r.Scale.Name)
	b.WriteString("| trace | clients | requests | periods | traffic |\n|---|---:|---:|---:|---|\n")
	for _, t := range r.Traces {
		fmt.Fprintf(&b, "| `%s` | %d | %d | %d | %s |\n", t.Name, t.Clients, t.Requests, t.Periods, t.Title)
	}
	fmt.Fprintf(&b, "\n| trace | algorithm | admitted | ÷ exact | max in a window ÷ Rate | wrongly allowed | … by > %d%% | wrongly denied | … under %d%% full |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n", Tolerance, 100-Tolerance)
	for _, t := range r.Traces {
		exact, _ := r.Row(t.Name, Exact)
		for _, a := range Algorithms {
			row, _ := r.Row(t.Name, a)
			fmt.Fprintf(&b, "| `%s` | %s | %s | %.3f | %.2f | %s | %s | %s | %s |\n", t.Name, algorithmLabel(a),
				percent(share(row.Admitted, row.Requests)), share(row.Admitted, exact.Admitted), row.MaxRatio(r.Limit.Rate),
				percent(row.WronglyAllowedShare()), percent(row.FarAllowedShare()),
				percent(row.WronglyDeniedShare()), percent(row.FarDeniedShare()))
		}
	}
	b.WriteString("\nSliding window counter, two ways of counting. *Admitted only* (sluice): the counter's decisions against the exact log over the requests it admitted, and its weighted estimate against the true count of its admissions in the window. *Every request* (Cloudflare's study): the estimate over all of the client's requests, admitted or not, against the exact count of all of them, and how often the two disagree on whether the client is over the limit. Estimate error: the mean of |estimate − true| ÷ true over the requests whose window holds at least one counted request.\n\n")
	b.WriteString("| trace | admitted only: wrong decisions | admitted only: estimate error | every request: disagreements | every request: estimate error |\n|---|---:|---:|---:|---:|\n")
	for _, t := range r.Traces {
		row, _ := r.Row(t.Name, Algorithms[2])
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", t.Name, percent(row.WrongShare()), percent(row.EstimateError()),
			percent(t.CountAll.DisagreementShare()), percent(t.CountAll.EstimateError()))
	}
	return b.String()
}

// algorithmLabel formats a row name for the table.
func algorithmLabel(a string) string {
	if a == Exact {
		return "exact (reference)"
	}
	return "`" + a + "`"
}

// percent formats a share in [0, 1] as a percentage with enough digits to
// tell 0.003% from zero.
func percent(f float64) string {
	p := 100 * f
	switch {
	case math.IsNaN(p):
		return "n/a"
	case p == 0:
		return "0"
	case p < 0.01:
		return fmt.Sprintf("%.4f%%", p)
	case p < 1:
		return fmt.Sprintf("%.3f%%", p)
	}
	return fmt.Sprintf("%.2f%%", p)
}

// palette colours the rows of Algorithms (grey for the reference, then the
// Okabe-Ito colours, which stay distinct for colour-blind readers).
var palette = []string{"#888888", "#0072B2", "#009E73", "#D55E00", "#E69F00", "#56B4E9", "#CC79A7"}

// Chart geometry, in SVG user units.
const (
	chartWidth  = 1000
	chartLeft   = 64
	chartRight  = 44
	panelHeight = 240
)

// SVG draws the report as a standalone SVG image: grouped bars per trace,
// one per algorithm, of the largest window count ÷ Rate (top) and of the
// share of requests decided differently from the exact log (bottom,
// wrongly allowed solid, wrongly denied pale).
func (r *Report) SVG() []byte {
	var b bytes.Buffer
	top1 := 100
	top2 := top1 + panelHeight + 100
	height := top2 + panelHeight + 50
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">sluice: accuracy of the six algorithms against an exact sliding log (%d per %s, seed %d, scale %s)</text>`+"\n",
		chartLeft, r.Limit.Rate, r.Limit.Period, r.Seed, esc(r.Scale.Name))
	// Legend.
	x := chartLeft
	for i, a := range Algorithms {
		fmt.Fprintf(&b, `<rect x="%d" y="36" width="12" height="12" fill="%s"/><text x="%d" y="46">%s</text>`+"\n", x, palette[i], x+16, esc(a))
		x += 16 + 7*len(a) + 22
	}

	// Panel 1: the largest window count ÷ Rate.
	maxRatio := 1.0
	for _, row := range r.Rows {
		maxRatio = max(maxRatio, row.MaxRatio(r.Limit.Rate))
	}
	ymax1 := math.Floor(maxRatio/0.5)*0.5 + 0.5
	r.panel(&b, top1, "Most requests of one client admitted within any sliding window of one Period, ÷ Rate (1 = the limit held)",
		ymax1, 0.5, func(v float64) string { return fmt.Sprintf("%.1f", v) },
		func(row Row) (float64, float64) { return row.MaxRatio(r.Limit.Rate), 0 },
		func(v, _ float64) string { return fmt.Sprintf("%.2f", v) })
	y1 := yOf(top1, 1, ymax1)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#c00000" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", chartLeft, chartWidth-chartRight, y1, y1)
	fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#c00000">limit</text>`+"\n", chartWidth-chartRight+4, y1+4)

	// Panel 2: wrong decisions, % of all requests.
	maxWrong := 0.0
	for _, row := range r.Rows {
		maxWrong = max(maxWrong, 100*row.WrongShare())
	}
	step := niceStep(maxWrong)
	ymax2 := math.Floor(maxWrong/step)*step + step
	r.panel(&b, top2, "Requests decided differently from the exact sliding log, % of all requests (solid: wrongly allowed; pale: wrongly denied)",
		ymax2, step, func(v float64) string { return trimFloat(v) + "%" },
		func(row Row) (float64, float64) {
			return 100 * row.WronglyAllowedShare(), 100 * row.WronglyDeniedShare()
		},
		func(a, d float64) string { return trimFloat(roundSig(a+d, 2)) })
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// panel draws one bar panel whose plot area starts at top: horizontal grid
// lines every step up to ymax, then for each trace a group of bars, one per
// algorithm, each a solid part and a pale part stacked (value returns both).
func (r *Report) panel(b *bytes.Buffer, top int, title string, ymax, step float64, tick func(float64) string,
	value func(Row) (float64, float64), label func(float64, float64) string) {
	left, right := float64(chartLeft), float64(chartWidth-chartRight)
	bottom := yOf(top, 0, ymax)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", chartLeft, top-28, esc(title))
	for v := 0.0; v <= ymax+step/1000; v += step {
		y := yOf(top, v, ymax)
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#dddddd"/>`+"\n", left, right, y, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, esc(tick(v)))
	}
	groupW := (right - left) / float64(len(r.Traces))
	barW := groupW * 0.84 / float64(len(Algorithms))
	for g, t := range r.Traces {
		gx := left + float64(g)*groupW + groupW*0.08
		for i, a := range Algorithms {
			row, _ := r.Row(t.Name, a)
			solid, pale := value(row)
			x := gx + float64(i)*barW
			ys, yp := yOf(top, solid, ymax), yOf(top, solid+pale, ymax)
			tip := fmt.Sprintf("%s, %s: %s", t.Name, a, label(solid, pale))
			if pale > 0 {
				tip = fmt.Sprintf("%s, %s: %s wrongly allowed, %s wrongly denied", t.Name, a, trimFloat(roundSig(solid, 3))+"%", trimFloat(roundSig(pale, 3))+"%")
			}
			fmt.Fprintf(b, `<g><title>%s</title>`, esc(tip))
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x, ys, barW-1, bottom-ys, palette[i])
			if pale > 0 {
				fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.35"/>`, x, yp, barW-1, ys-yp, palette[i])
			}
			lx, ly := x+barW/2+3, yp-3
			fmt.Fprintf(b, `<text transform="translate(%.1f %.1f) rotate(-90)" font-size="9" fill="#333333">%s</text></g>`+"\n", lx, ly, esc(label(solid, pale)))
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+(float64(g)+0.5)*groupW, bottom+18, esc(t.Name))
	}
	fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#333333"/>`+"\n", left, right, bottom, bottom)
}

// yOf maps v in [0, ymax] to the y coordinate of a panel starting at top.
func yOf(top int, v, ymax float64) float64 {
	return float64(top) + float64(panelHeight)*(1-min(v, ymax)/ymax)
}

// niceStep returns a grid step of 1, 2 or 5 times a power of ten that cuts
// [0, v] into at most five steps.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v/(m*p) <= 5 {
			return m * p
		}
	}
	return 10 * p
}

// roundSig rounds v to n significant digits.
func roundSig(v float64, n int) float64 {
	if v == 0 {
		return 0
	}
	p := math.Pow(10, float64(n)-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}

// trimFloat formats v without trailing zeros.
func trimFloat(v float64) string { return fmt.Sprintf("%.6g", v) }

// esc escapes s for SVG text and attribute content.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// Markers delimit the generated part of docs/algorithms.md.
const (
	BeginMarker = "<!-- accuracy:begin (generated by bench/cmd/accuracy; do not edit) -->"
	EndMarker   = "<!-- accuracy:end -->"
)

// ReplaceGenerated returns doc with the text between BeginMarker and
// EndMarker replaced by generated.
func ReplaceGenerated(doc, generated string) (string, error) {
	i := strings.Index(doc, BeginMarker)
	if i < 0 {
		return "", fmt.Errorf("accuracy: the document has no %q line", BeginMarker)
	}
	i += len(BeginMarker)
	j := strings.Index(doc[i:], EndMarker)
	if j < 0 {
		return "", fmt.Errorf("accuracy: the document has no %q after %q", EndMarker, BeginMarker)
	}
	return doc[:i] + "\n" + generated + "\n" + doc[i+j:], nil
}
