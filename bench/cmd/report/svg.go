package main

import (
	"fmt"
	"html"
	"io"
	"math"
)

// bar is one ratio of the chart, oriented so that above 1 sluice is better.
type bar struct {
	group, label string
	value        float64
	target       float64 // 0: no target
	note         string  // what the ratio is against
}

// met reports whether the bar reaches its target (false without one).
func (b bar) met() bool {
	return b.target > 0 && b.value >= b.target && !(b.target == 1 && b.value == 1)
}

// Chart geometry, in pixels.
const (
	chartWidth = 1040
	labelRight = 300 // right edge of the labels
	plotLeft   = 315
	plotRight  = 715
	noteLeft   = 730
	rowHeight  = 26
	groupGap   = 24
	barHeight  = 16
	chartTop   = 64
)

// Colours of the bars.
const (
	colorMet    = "#2e7d32"
	colorMissed = "#c62828"
	colorInfo   = "#9e9e9e"
)

// writeChart writes a horizontal bar chart of rows as a standalone SVG
// document: one bar per ratio from 1× towards its value on a log2 scale
// symmetric around 1×, a tick at its target, grouped under headings.
func writeChart(w io.Writer, rows []bar, title string) {
	c := chart{w: w, k: chartScale(rows)}
	groups := 0
	for i, b := range rows {
		if i == 0 || rows[i-1].group != b.group {
			groups++
		}
	}
	c.plotBottom = chartTop + groups*groupGap + len(rows)*rowHeight
	height := c.plotBottom + 70

	esc := html.EscapeString
	c.p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", chartWidth, height, chartWidth, height)
	c.p(`<title>%s</title>`+"\n", esc(title))
	c.p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	c.p(`<text x="16" y="26" font-size="16" font-weight="bold">%s</text>`+"\n", esc(title))
	c.p(`<text x="16" y="46" fill="#555555">log scale; time, overhead and bytes as the reference's ÷ sluice's, throughput as sluice's ÷ the reference's</text>` + "\n")
	c.grid()
	c.bars(rows)
	c.legend()
	c.p("</svg>\n")
}

// chartScale is the k of the chart's scale, 2^-k … 2^k: the smallest
// that holds every value and target, at least 1 and at most 5.
func chartScale(rows []bar) float64 {
	k := 1.0
	for _, b := range rows {
		for _, v := range []float64{b.value, b.target} {
			if v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
				k = max(k, math.Ceil(math.Abs(math.Log2(v))))
			}
		}
	}
	return min(k, 5)
}

// chart is an SVG chart being written: its scale spans 2^-k … 2^k, and
// its plot ends at plotBottom.
type chart struct {
	w          io.Writer
	k          float64
	plotBottom int
}

func (c *chart) p(format string, args ...any) { fmt.Fprintf(c.w, format, args...) }

// x is the abscissa of the ratio v, clipped to the scale (0 and below at
// its left end).
func (c *chart) x(v float64) float64 {
	l := math.Log2(v)
	if math.IsNaN(l) || v <= 0 {
		l = -c.k
	}
	l = max(-c.k, min(c.k, l))
	return plotLeft + (l+c.k)/(2*c.k)*(plotRight-plotLeft)
}

// grid writes one line per power of two, 1× darker, with the axis's
// labels.
func (c *chart) grid() {
	for e := -c.k; e <= c.k; e++ {
		v := math.Pow(2, e)
		gx := c.x(v)
		stroke, sw := "#e0e0e0", 1
		if e == 0 {
			stroke, sw = "#424242", 1
		}
		c.p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="%d"/>`+"\n", gx, chartTop-6, gx, c.plotBottom, stroke, sw)
		c.p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#555555">%s×</text>`+"\n", gx, c.plotBottom+16, axisLabel(v))
	}
	c.p(`<text x="%d" y="%d" fill="#555555">← the reference is better</text>`+"\n", plotLeft, c.plotBottom+34)
	c.p(`<text x="%d" y="%d" text-anchor="end" fill="#555555">sluice is better →</text>`+"\n", plotRight, c.plotBottom+34)
}

// bars writes each row's bar, coloured by its target, under its group's
// heading.
func (c *chart) bars(rows []bar) {
	esc := html.EscapeString
	y := chartTop
	for i, b := range rows {
		if i == 0 || rows[i-1].group != b.group {
			c.p(`<text x="16" y="%d" font-weight="bold">%s</text>`+"\n", y+16, esc(b.group))
			y += groupGap
		}
		color := colorInfo
		if b.target > 0 {
			color = colorMissed
			if b.met() {
				color = colorMet
			}
		}
		x0, x1 := c.x(1), c.x(b.value)
		left, width := math.Min(x0, x1), math.Abs(x1-x0)
		by := y + (rowHeight-barHeight)/2
		c.p(`<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelRight, by+12, esc(b.label))
		c.p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %.2f× %s</title></rect>`+"\n",
			left, by, math.Max(width, 1), barHeight, color, esc(b.label), b.value, esc(b.note))
		if b.target > 0 {
			tx := c.x(b.target)
			c.p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000000" stroke-width="2"><title>target %.2f×</title></line>`+"\n", tx, by-3, tx, by+barHeight+3, b.target)
		}
		c.p(`<text x="%d" y="%d">%.2f× %s</text>`+"\n", noteLeft, by+12, b.value, esc(b.note))
		y += rowHeight
	}
}

// legend writes the colours' and the target tick's legend.
func (c *chart) legend() {
	ly := c.plotBottom + 56
	for i, l := range []struct{ color, text string }{{colorMet, "target met"}, {colorMissed, "target not met"}, {colorInfo, "no target"}} {
		lx := 16 + i*150
		c.p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, ly-10, l.color)
		c.p(`<text x="%d" y="%d">%s</text>`+"\n", lx+18, ly, l.text)
	}
	c.p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000" stroke-width="2"/>`+"\n", 470, ly-11, 470, ly+2)
	c.p(`<text x="%d" y="%d">target</text>`+"\n", 478, ly)
}

func axisLabel(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}
