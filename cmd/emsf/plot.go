package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"

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
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	} else {
		p.Y.Tick.Marker = distinctTicks{}
	}
	p.Add(plotter.NewGrid())

	var names []string
	curves := map[string][]experiment.Summary{}
	for _, s := range sums {
		name := s.CurveName()
		if _, ok := curves[name]; !ok {
			names = append(names, name)
		}
		curves[name] = append(curves[name], s)
	}
	for k, name := range names {
		var xys plotter.XYs
		var errs plotter.YErrors
		infinite := 0
		for _, s := range curves[name] {
			if math.IsInf(s.Mean, 0) || math.IsNaN(s.Mean) || logY && !(s.Mean > 0) {
				infinite++
				continue
			}
			xys = append(xys, plotter.XY{X: float64(s.X), Y: s.Mean})
			errs = append(errs, struct{ Low, High float64 }{s.SE, s.SE})
		}
		label := name
		switch {
		case infinite == len(curves[name]):
			label += " (+Inf everywhere: not drawn)"
		case infinite > 0:
			label += fmt.Sprintf(" (+Inf at %d of %d points: not drawn)", infinite, len(curves[name]))
		}
		c := plotutil.Color(k)
		line := &plotter.Line{LineStyle: plotter.DefaultLineStyle}
		line.Color = c
		line.Dashes = plotutil.Dashes(k / len(plotutil.DefaultColors)) // a new dash pattern when the colours repeat
		points := &plotter.Scatter{GlyphStyle: plotter.DefaultGlyphStyle}
		points.Color = c
		points.Shape = plotutil.Shape(k)
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
	p.Draw(draw.Crop(c, 0, w-width, 0, 0))
	legend.Top = true
	legend.Draw(draw.Crop(c, w+vg.Points(4), 0, 0, -vg.Points(36)))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return arrowio.WriteFileAtomic(path, buf.Bytes())
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
