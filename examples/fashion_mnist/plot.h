// metrics.svg: loss and test accuracy per epoch, as a browser shows it. The pieces are pure
// functions (axis ticks, panel layout) so that what makes a plot readable is tested on its own.
#pragma once

#include <string>
#include <vector>

#include "metrics.h"

// Axis ticks at round values: steps of 1, 2 or 5 times a power of ten.
struct Ticks {
  double lo = 0, hi = 1;  // the axis range: the first and the last tick
  double step = 1;
  int decimals = 0;            // what the labels need to show the step exactly
  std::vector<double> values;  // lo, lo + step, ..., hi
};

// Ticks whose range covers [min, max] with about `target` (>= 2) ticks, as few as cover it
// (Heckbert's "nice numbers"); a range of one value is widened around it. `min_step`: the
// smallest step allowed (1 for whole numbers such as epochs). Throws std::invalid_argument
// when min or max is not finite, min > max, or target < 2.
Ticks nice_ticks(double min, double max, int target = 5, double min_step = 0);

// `value` with `decimals` decimals ("0.35", "90", never "-0").
std::string tick_label(double value, int decimals);

struct Box {
  double x = 0, y = 0, w = 0, h = 0;
  double right() const { return x + w; }
  double bottom() const { return y + h; }
};

// True when the boxes share more than an edge.
bool overlaps(const Box& a, const Box& b);

// Where one chart's parts go inside its panel: the title on top, under it a band for the legend
// (so that no line of the plot crosses it), the plot area, and room left of it for the value
// labels and under it for the epoch labels.
struct PanelLayout {
  Box title, legend, plot;
  std::vector<Box> legend_entries;  // one per series, left to right in the legend band
};

// Throws std::invalid_argument when the panel is too small for its parts or the legend's
// entries (each about `char_width` per character of its name, plus a swatch) do not fit its width.
PanelLayout panel_layout(const Box& panel, const std::vector<std::string>& series_names, double char_width = 7);

// Two panels: training and test loss per epoch; test accuracy (%) per epoch. Each draws its
// grid, then its lines, then its frame (so no grid line paints over the frame).
std::string render_svg(const std::vector<EpochMetrics>& rows);
