package main

import (
	"bytes"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/emsf/emsf/arrowio"
)

// plotCurves draws one line per curve (mean over runs against the number
// of transitions, log-scaled x, and y if logY) with error bars of one standard error, and
// writes the PNG atomically.
func plotCurves(path, title, xLabel, yLabel string, logY bool, sums []summary) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())

	var names []string
	curves := map[string][]summary{}
	for _, s := range sums {
		name := s.curveName()
		if _, ok := curves[name]; !ok {
			names = append(names, name)
		}
		curves[name] = append(curves[name], s)
	}
	// The legend goes in the top corner when the curves fall (errors
	// against sample size) and in the bottom one when they rise (returns
	// against hands played), away from where the curves end.
	rise := 0
	for _, name := range names {
		pts := curves[name]
		first, last := pts[0], pts[0]
		for _, s := range pts {
			if s.x < first.x {
				first = s
			}
			if s.x > last.x {
				last = s
			}
		}
		if last.mean > first.mean {
			rise++
		} else {
			rise--
		}
	}
	p.Legend.Top = rise <= 0
	for k, name := range names {
		pts := curves[name]
		xys := make(plotter.XYs, len(pts))
		errs := make(plotter.YErrors, len(pts))
		for q, s := range pts {
			xys[q] = plotter.XY{X: float64(s.x), Y: s.mean}
			errs[q].Low, errs[q].High = s.se, s.se
		}
		sortXY(xys, errs)
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		c := plotutil.Color(k)
		line.Color = c
		line.Dashes = plotutil.Dashes(k / len(plotutil.DefaultColors)) // a new dash pattern when the colours repeat
		points.Color = c
		points.Shape = plotutil.Shape(k)
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
		p.Legend.Add(name, line, points)
	}
	p.Legend.TextStyle.Color = color.Black
	p.Legend.Padding = vg.Points(2)

	// More curves than fit beside them: the legend goes to the right of
	// the plot instead of over it.
	const w, h = 7 * vg.Inch, 4.5 * vg.Inch
	width := w
	legend := p.Legend
	if len(names) > legendInside {
		p.Legend = plot.NewLegend()
		width = w + legend.Rectangle(draw.New(vgimg.New(w, h))).Size().X + vg.Points(8)
	}
	fc, err := draw.NewFormattedCanvas(width, h, "png")
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	c := draw.New(fc)
	p.Draw(draw.Crop(c, 0, w-width, 0, 0))
	if len(names) > legendInside {
		legend.Top = true
		legend.Draw(draw.Crop(c, w+vg.Points(4), 0, 0, -vg.Points(24)))
	}
	var buf bytes.Buffer
	if _, err := fc.WriteTo(&buf); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return arrowio.WriteFileAtomic(path, buf.Bytes())
}

// legendInside is the most curves whose legend is drawn inside the plot.
const legendInside = 6

// sortXY sorts the points of a curve by x (insertion sort: a few points).
func sortXY(xys plotter.XYs, errs plotter.YErrors) {
	for i := 1; i < len(xys); i++ {
		for j := i; j > 0 && xys[j].X < xys[j-1].X; j-- {
			xys[j], xys[j-1] = xys[j-1], xys[j]
			errs[j], errs[j-1] = errs[j-1], errs[j]
		}
	}
}
