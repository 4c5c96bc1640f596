package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor/experiment"
)

// plotCurves draws one line per curve (mean over runs against the number
// of transitions, log-scaled x, and y if logY) with error bars of one
// standard error, the legend to the right of the data, and a caption that
// says what the bars are and over how many runs; it writes the PNG (1 200
// pixels wide) atomically. Points whose mean is not finite are not drawn
// and the legend says so (a curve that is +Inf everywhere keeps its entry).
// The x ticks are the x of the data where there are few (readableTicks),
// a log y axis is labelled at 1, 2, 5 × 10^k or as densely as its range
// needs (logTicks); a setting that every curve shares is left out of the
// legend; a curve that lies on an earlier one (the same points, to a
// thousandth of the y range) is drawn dashed with larger markers and its
// legend entry names the curve it covers. Text is words and Unicode: an
// underscore (a TeX subscript that would print literally) is an error.
func plotCurves(path, title, xLabel, yLabel string, logY bool, sums []experiment.Summary) error {
	p := plot.New()
	minRuns, maxRuns := 0, 0
	for k, s := range sums {
		if k == 0 || s.Runs < minRuns {
			minRuns = s.Runs
		}
		maxRuns = max(maxRuns, s.Runs)
	}
	runs := fmt.Sprint(minRuns)
	if maxRuns != minRuns {
		runs = fmt.Sprintf("%d to %d", minRuns, maxRuns)
	}
	unit := " runs"
	if maxRuns == 1 {
		unit = " run"
	}
	p.Title.Text = title + "\nmean over " + runs + unit + "; error bars: ±1 standard error of the mean"
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.X.Scale = plot.LogScale{}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	} else {
		p.Y.Tick.Marker = distinctTicks{}
	}
	p.Add(plotter.NewGrid())

	curves, names := curvesOf(sums)
	if err := plainText(append([]string{title, xLabel, yLabel}, names...)...); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	var xs []float64
	for _, s := range sums {
		if !slices.Contains(xs, float64(s.X)) {
			xs = append(xs, float64(s.X))
		}
	}
	p.X.Tick.Marker = readableTicks(xs)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range sums {
		if y, ok := plotted(s.Mean, logY); ok {
			lo, hi = min(lo, y), max(hi, y)
		}
	}
	for k, name := range names {
		var xys plotter.XYs
		var errs plotter.YErrors
		infinite := 0
		for _, s := range curves[k] {
			if _, ok := plotted(s.Mean, logY); !ok {
				infinite++
				continue
			}
			xys = append(xys, plotter.XY{X: float64(s.X), Y: s.Mean})
			errs = append(errs, struct{ Low, High float64 }{s.SE, s.SE})
		}
		label := name
		switch {
		case infinite == len(curves[k]):
			label += " (+Inf everywhere: not drawn)"
		case infinite > 0:
			label += fmt.Sprintf(" (+Inf at %d of %d points: not drawn)", infinite, len(curves[k]))
		}
		covers := -1
		for j := range k {
			if samePoints(curves[j], curves[k], logY, (hi-lo)/1000) {
				covers = j
				break
			}
		}
		c := plotutil.Color(k)
		line := &plotter.Line{LineStyle: plotter.DefaultLineStyle}
		line.Color = c
		line.Dashes = plotutil.Dashes(k / len(plotutil.DefaultColors)) // a new dash pattern when the colours repeat
		points := &plotter.Scatter{GlyphStyle: plotter.DefaultGlyphStyle}
		points.Color = c
		points.Shape = plotutil.Shape(k)
		if covers >= 0 {
			label += " — the same points as " + names[covers]
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
			points.Radius = 2 * plotter.DefaultGlyphStyle.Radius
		}
		if len(xys) > 0 {
			sortXY(xys, errs)
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return fmt.Errorf("plot %s: %w", name, err)
			}
			l.LineStyle, pts.GlyphStyle = line.LineStyle, points.GlyphStyle
			line, points = l, pts
			bars, err := plotter.NewYErrorBars(struct {
				plotter.XYs
				plotter.YErrors
			}{xys, errs})
			if err != nil {
				return fmt.Errorf("plot %s error bars: %w", name, err)
			}
			bars.Color = c
			bars.CapWidth = vg.Points(5)
			p.Add(line, points, bars)
		}
		p.Legend.Add(label, line, points)
	}
	p.Legend.TextStyle.Color = color.Black
	p.Legend.Padding = vg.Points(2)

	// The legend goes to the right of the plot, never over the data.
	const w, h = 7 * vg.Inch, 4.5 * vg.Inch
	const dpi = 172 // 7 inches: 1 204 pixels
	legend := p.Legend
	p.Legend = plot.NewLegend()
	width := w + legend.Rectangle(draw.New(vgimg.New(w, h))).Size().X + vg.Points(8)
	img := vgimg.NewWith(vgimg.UseWH(width, h), vgimg.UseDPI(dpi))
	c := draw.New(img)
	// The y label is drawn here, left of the plot and centred on it:
	// gonum places a vertical label's box at the arithmetic middle of
	// the axis range, which on a log axis is near the top, and shrinks
	// the plot from above to fit a long label there.
	ylabel := p.Y.Label
	p.Y.Label.Text = ""
	ysty := ylabel.TextStyle
	ysty.Rotation = math.Pi / 2
	ysty.XAlign, ysty.YAlign = draw.XCenter, draw.YCenter
	box := ysty.Rectangle(ylabel.Text) // around the point the text is drawn at
	margin := vg.Points(4)
	labelW := box.Size().X + 2*margin
	c.FillText(ysty, vg.Point{X: margin - box.Min.X, Y: h / 2}, ylabel.Text)
	p.Draw(draw.Crop(c, labelW, w-width, 0, 0))
	legend.Top = true
	legend.Draw(draw.Crop(c, w+vg.Points(4), 0, 0, -vg.Points(36)))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return arrowio.WriteFileAtomic(path, buf.Bytes())
}

// curvesOf groups summaries into curves, in the order they first appear,
// and names each: its method, m and setting, the setting left out when
// every curve has the same one (it says nothing then).
func curvesOf(sums []experiment.Summary) (curves [][]experiment.Summary, names []string) {
	oneSetting := true
	for _, s := range sums {
		oneSetting = oneSetting && s.Setting == sums[0].Setting
	}
	index := map[string]int{}
	for _, s := range sums {
		if oneSetting {
			s.Setting = ""
		}
		name := s.CurveName()
		k, ok := index[name]
		if !ok {
			k = len(names)
			index[name] = k
			names = append(names, name)
			curves = append(curves, nil)
		}
		curves[k] = append(curves[k], s)
	}
	return curves, names
}

// plotted returns the y at which a mean is drawn (its log on a log axis)
// and whether it is drawn at all (finite, and > 0 on a log axis).
func plotted(mean float64, logY bool) (float64, bool) {
	switch {
	case math.IsInf(mean, 0) || math.IsNaN(mean):
		return 0, false
	case logY && !(mean > 0):
		return 0, false
	case logY:
		return math.Log10(mean), true
	}
	return mean, true
}

// samePoints reports whether curves a and b have drawn points at the same
// x, none of them farther apart than tol in y (as drawn): b would hide a.
func samePoints(a, b []experiment.Summary, logY bool, tol float64) bool {
	at := map[int]float64{}
	for _, s := range a {
		if y, ok := plotted(s.Mean, logY); ok {
			at[s.X] = y
		}
	}
	n := 0
	for _, s := range b {
		y, ok := plotted(s.Mean, logY)
		if !ok {
			continue
		}
		ya, ok := at[s.X]
		if !ok || math.Abs(y-ya) > tol {
			return false
		}
		n++
	}
	return n > 0 && n == len(at)
}

// plainText returns an error for figure text with an underscore: TeX's
// subscript, which a PNG would print literally ("‖P − P̃‖_F"); figures say
// it in words or Unicode.
func plainText(texts ...string) error {
	for _, t := range texts {
		if strings.Contains(t, "_") {
			return fmt.Errorf("figure text %q holds an underscore, which would print literally: write it in words or Unicode", t)
		}
	}
	return nil
}

// readableTicks are the ticks of a log x axis: with at most maxValueTicks
// distinct data x, labelled ticks at exactly those x (a reader sees where
// the points are and what they are), else logTicks; unlabelled minor
// ticks at 1…9 × 10^k either way.
func readableTicks(xs []float64) plot.Ticker {
	if len(xs) == 0 || len(xs) > maxValueTicks {
		return logTicks{}
	}
	return valueTicks(slices.Sorted(slices.Values(xs)))
}

// maxValueTicks is the most data x that readableTicks labels one by one.
const maxValueTicks = 12

// valueTicks labels the given values (sorted).
type valueTicks []float64

func (v valueTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for _, x := range v {
		if x >= lo && x <= hi {
			ticks = append(ticks, plot.Tick{Value: x, Label: tickLabel(x)})
		}
	}
	return append(ticks, minorLogTicks(lo, hi, ticks)...)
}

// logTicks label a log axis as densely as its range needs: 1 … 9 × 10^k
// over less than a decade, 1, 2, 5 × 10^k up to three decades, 1 and
// 3 × 10^k up to five, powers of ten beyond (gonum's LogTicks label only
// the powers of ten, one or none on a short range); at least two labels.
// Unlabelled minor ticks mark 1 … 9 × 10^k.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) {
		return plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	}
	decades := math.Log10(hi / lo)
	var mantissas []float64
	switch {
	case decades < 1:
		mantissas = []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}
	case decades <= 3:
		mantissas = []float64{1, 2, 5}
	case decades <= 5:
		mantissas = []float64{1, 3}
	default:
		mantissas = []float64{1}
	}
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range mantissas {
			v := m * math.Pow(10, e)
			if v >= lo*(1-1e-12) && v <= hi*(1+1e-12) {
				ticks = append(ticks, plot.Tick{Value: v, Label: tickLabel(v)})
			}
		}
	}
	if len(ticks) < 2 {
		// Inside one mantissa step: label the ends, to two digits.
		ticks = ticks[:0]
		for _, v := range []float64{lo, hi} {
			r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 2, 64), 64)
			ticks = append(ticks, plot.Tick{Value: r, Label: tickLabel(r)})
		}
	}
	return append(ticks, minorLogTicks(lo, hi, ticks)...)
}

// minorLogTicks are unlabelled ticks at 1 … 9 × 10^k in [lo, hi] where
// labelled does not have one, over at most six decades.
func minorLogTicks(lo, hi float64, labelled []plot.Tick) []plot.Tick {
	if !(lo > 0) || !(hi > lo) || math.Log10(hi/lo) > 6 {
		return nil
	}
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1.0; m <= 9; m++ {
			v := m * math.Pow(10, e)
			if v < lo || v > hi || slices.ContainsFunc(labelled, func(t plot.Tick) bool { return math.Abs(t.Value-v) <= 1e-12*v }) {
				continue
			}
			ticks = append(ticks, plot.Tick{Value: v})
		}
	}
	return ticks
}

// tickLabel writes a tick value short: up to 4 significant digits, and
// 10 000 and more in thousands (k) or millions (M).
func tickLabel(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6 && a < 1e12:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4 && a < 1e6:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// distinctTicks are gonum's default ticks with the major ones labelled by
// the fewest significant digits that tell them apart and say their value
// (to 1e-9 of the range, so −4.625 is not shown as −4.62): the default labels
// of a narrow range far from 0 (held-out log-likelihoods around −4.6) can
// all read the same.
type distinctTicks struct{}

func (distinctTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for digits := 1; digits <= 12; digits++ {
		seen := map[string]bool{}
		distinct := true
		for _, t := range ticks {
			if t.Label == "" {
				continue
			}
			l := strconv.FormatFloat(t.Value, 'g', digits, 64)
			v, _ := strconv.ParseFloat(l, 64)
			distinct = distinct && !seen[l] && math.Abs(v-t.Value) <= 1e-9*(hi-lo)
			seen[l] = true
		}
		if distinct || digits == 12 {
			for k := range ticks {
				if ticks[k].Label != "" {
					ticks[k].Label = strconv.FormatFloat(ticks[k].Value, 'g', digits, 64)
				}
			}
			return ticks
		}
	}
	return ticks
}

// sortXY sorts the points of a curve by x (insertion sort: a few points).
func sortXY(xys plotter.XYs, errs plotter.YErrors) {
	for i := 1; i < len(xys); i++ {
		for j := i; j > 0 && xys[j].X < xys[j-1].X; j-- {
			xys[j], xys[j-1] = xys[j-1], xys[j]
			errs[j], errs[j-1] = errs[j-1], errs[j]
		}
	}
}
