package adminui

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/service/internal/traffic"
)

// The geometry of a traffic chart, in SVG user units: the plot is the
// rectangle [chartLeft, chartLeft+chartPlotW] x [chartTop, chartTop+chartPlotH].
const (
	chartW     = 1060
	chartH     = 234
	chartLegY  = 226
	chartLeft  = 56
	chartTop   = 24
	chartPlotW = 990
	chartPlotH = 150
)

// chart is one server-rendered SVG chart: a bar for each of equal
// periods, its outcomes stacked (allowed at the bottom, then warned,
// shadow-denied, denied), no script (the page's CSP allows none). Colours
// are SVG presentation attributes, which the CSP's style-src does not
// govern.
type chart struct {
	ID, Title, Period string
	W, H              int
	Left, Top         int
	Right, Bottom     int
	PlotW, PlotH      int
	YMax              int64
	YMid              int64
	YMidAt            string
	Bars              []chartBars
	Columns           []chartColumn
	XLabels           []chartLabel
	Legend            []chartLegend
	Empty             bool
}

// chartBars are the bar segments of one outcome.
type chartBars struct {
	Outcome, Colour string
	Rects           []chartRect
}

type chartRect struct {
	X, Y, W, H string
	Period     int
}

// chartColumn is a period's hover target: its <title> gives the counts.
type chartColumn struct {
	X, W  string
	Title string
}

type chartLabel struct {
	X, Text, Anchor string
}

type chartLegend struct {
	X, TX, Y, TY, Outcome, Colour string
}

// outcomeColours are the lines' colours, by outcome.
var outcomeColours = [traffic.NumOutcomes]string{"#2e7d32", "#c77800", "#7b1fa2", "#c62828"}

// newChart draws counts, one per period of length step from first.
func newChart(id, title, period string, first time.Time, step time.Duration, counts []traffic.Counts) chart {
	c := chart{ID: id, Title: title, Period: period, W: chartW, H: chartH, Left: chartLeft, Top: chartTop,
		Right: chartLeft + chartPlotW, Bottom: chartTop + chartPlotH, PlotW: chartPlotW, PlotH: chartPlotH}
	var top int64
	for _, n := range counts {
		top = max(top, n.Total())
	}
	c.Empty = top == 0
	c.YMax = niceCeil(top)
	c.YMid = c.YMax / 2
	c.YMidAt = coord(chartYOf(c.YMid, c.YMax))
	slot := float64(chartPlotW) / float64(max(len(counts), 1))
	base := make([]int64, len(counts))
	for o := range traffic.NumOutcomes {
		bars := chartBars{Outcome: o.String(), Colour: outcomeColours[o]}
		for i, n := range counts {
			if n[o] == 0 {
				continue
			}
			y0, y1 := chartYOf(base[i], c.YMax), chartYOf(base[i]+n[o], c.YMax)
			base[i] += n[o]
			bars.Rects = append(bars.Rects, chartRect{X: coord(chartLeft + float64(i)*slot + slot*0.12), W: coord(slot * 0.76),
				Y: coord(y1), H: coord(y0 - y1), Period: i})
		}
		c.Bars = append(c.Bars, bars)
		x := float64(chartLeft + 150*int(o))
		c.Legend = append(c.Legend, chartLegend{X: coord(x), TX: coord(x + 16), Y: coord(chartLegY - 10), TY: coord(chartLegY),
			Outcome: o.String(), Colour: outcomeColours[o]})
	}
	for i, n := range counts {
		at := first.Add(time.Duration(i) * step).UTC()
		c.Columns = append(c.Columns, chartColumn{X: coord(chartLeft + float64(i)*slot), W: coord(slot),
			Title: fmt.Sprintf("%s UTC: %d allowed, %d warned, %d shadow-denied, %d denied", periodText(at, step),
				n[traffic.Allowed], n[traffic.Warned], n[traffic.ShadowDenied], n[traffic.Denied])})
	}
	for _, i := range []int{0, len(counts) / 2, len(counts) - 1} {
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case len(counts) - 1:
			anchor = "end"
		}
		x := chartLeft + (float64(i)+0.5)*slot
		switch i {
		case 0:
			x = chartLeft
		case len(counts) - 1:
			x = chartLeft + chartPlotW
		}
		c.XLabels = append(c.XLabels, chartLabel{X: coord(x), Anchor: anchor,
			Text: periodText(first.Add(time.Duration(i)*step).UTC(), step)})
	}
	return c
}

// chartYOf is the y of count v on an axis from 0 to top.
func chartYOf(v, top int64) float64 {
	return chartTop + chartPlotH - float64(v)/float64(top)*chartPlotH
}

// coord writes a coordinate to the thousandth.
func coord(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) }

// periodText names the period starting at t: HH:MM:SS for a second,
// HH:MM for a minute.
func periodText(t time.Time, step time.Duration) string {
	if step < time.Minute {
		return t.Format("15:04:05")
	}
	return t.Format("15:04")
}

// niceCeil is the axis top for a largest value v: 1, 2 or 5 times a power
// of ten, at least v, and at least 2 (the middle mark is then a whole
// count).
func niceCeil(v int64) int64 {
	if v <= 2 {
		return 2
	}
	p := int64(1)
	for p*10 < v {
		p *= 10
	}
	for _, m := range []int64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
