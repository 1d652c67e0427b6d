//! SVG charts of benchmark figures: grouped bars and lines, data in, file out.
//!
//! Independent of where the numbers come from: the benches hand over plain values. Every chart
//! is 900 pixels wide on a white background, its title and legend above the plot, each series in
//! its own color (a palette that stays distinct for color-blind readers). Text is written as SVG
//! `<text>` elements, rendered by whatever displays the file: no font is read or embedded. The
//! same input always gives the same bytes, so charts checked into the repository only change
//! when their figures do.
//!
//! The charts of the repository live in [`chart_dir`].

use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;
use std::path::{Path, PathBuf};

/// Chart width in pixels.
const WIDTH: u32 = 900;
/// Chart height in pixels (bar charts grow taller when they hold many bars).
const HEIGHT: u32 = 500;
/// Font family of every text: the viewer's own sans-serif.
const FONT: &str = "sans-serif";
/// The series colors in order (Okabe and Ito's palette, black last), reused past the eighth.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x55, 0x55, 0x55),
    RGBColor(0x00, 0x00, 0x00),
];
const GRID: RGBColor = RGBColor(0xE4, 0xE4, 0xE4);
const GRID_BOLD: RGBColor = RGBColor(0xCC, 0xCC, 0xCC);
const MUTED: RGBColor = RGBColor(0x77, 0x77, 0x77);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Where the repository keeps its benchmark charts: `docs/bench` at the root of the workspace.
///
/// Not created here: [`grouped_bars`] and [`lines`] create the folder of the file they write.
pub fn chart_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .join("docs")
        .join("bench")
}

/// Writes a grouped bar chart to `path` (an SVG file; its folder is created when missing).
///
/// One cluster per group, one bar per series in each: `values[g][s]` is series `s` in group
/// `g`, and `None` draws no bar (marked "n/a"), for a series that cannot do what the group
/// measures. The bars are horizontal, the groups listed top to bottom in the order given with
/// their names on the left, so long names stay readable; `y_label` names the value axis, drawn
/// along the bottom. The legend above the plot names each series in its color. Non-finite
/// values count as `None`.
///
/// # Errors
///
/// When `values` does not hold one row per group and one value per series in each row, or
/// when the file cannot be written.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    groups: &[&str],
    series: &[&str],
    values: &[Vec<Option<f64>>],
) -> Result<(), Box<dyn Error>> {
    if values.len() != groups.len() {
        return Err(format!(
            "{} rows of values for {} groups",
            values.len(),
            groups.len()
        )
        .into());
    }
    if let Some((g, row)) = values
        .iter()
        .enumerate()
        .find(|(_, r)| r.len() != series.len())
    {
        return Err(format!(
            "group {g} ({}) has {} values for {} series",
            groups[g],
            row.len(),
            series.len()
        )
        .into());
    }
    let value = |g: usize, s: usize| values[g][s].filter(|v| v.is_finite());
    let finite = || {
        values
            .iter()
            .flatten()
            .flatten()
            .copied()
            .filter(|v| v.is_finite())
    };
    let lo = finite().fold(0.0_f64, f64::min);
    let hi = finite().fold(0.0_f64, f64::max);
    let span = if hi > lo { hi - lo } else { 1.0 };
    // Room past the longest bar for its value.
    let x_lo = if lo < 0.0 { lo - 0.14 * span } else { 0.0 };
    let x_hi = if hi > lo { hi + 0.14 * span } else { lo + 1.0 };

    let n_groups = groups.len();
    let n_series = series.len().max(1);
    let bars = u32::try_from(n_groups * (n_series * 14 + 12)).unwrap_or(u32::MAX);
    let height = HEIGHT.max(bars.saturating_add(150)).min(4_000);
    // Group `g` is centered on `row(g)`: the first group on top.
    let row = |g: usize| (n_groups - 1 - g) as f64;
    let band = 0.8 / n_series as f64;

    let svg = render((WIDTH, height), |root| {
        let body = header(root, title, series, Swatch::Block)?;
        let labels = label_style();
        let mut label_width = 0;
        for g in groups {
            label_width = label_width.max(body.estimate_text_size(g, &labels)?.0);
        }
        let mut chart = ChartBuilder::on(&body)
            .margin_top(6)
            .margin_bottom(10)
            .margin_left(12)
            .margin_right(28)
            .x_label_area_size(52)
            .y_label_area_size(label_width + 16)
            .build_cartesian_2d(x_lo..x_hi, Rows::new(n_groups))?;
        let group_name = |y: &f64| {
            let r = y.round();
            if (y - r).abs() > 1e-6 || r < 0.0 || r >= n_groups as f64 {
                return String::new();
            }
            groups[n_groups - 1 - r as usize].to_owned()
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(y_label)
            .x_label_formatter(&|v| number(*v))
            .y_label_formatter(&group_name)
            .label_style(labels.clone())
            .axis_desc_style(label_style())
            .light_line_style(WHITE)
            .bold_line_style(GRID)
            .axis_style(BLACK)
            .draw()?;
        // A thin rule between two groups.
        chart.draw_series((1..n_groups).map(|g| {
            let y = row(g) + 0.5;
            PathElement::new(vec![(x_lo, y), (x_hi, y)], GRID_BOLD)
        }))?;
        let (_, top) = chart.backend_coord(&(0.0, 0.0));
        let (_, bottom) = chart.backend_coord(&(0.0, band));
        let bar_pixels = (top - bottom).abs();
        let gap = band * 0.1;
        let small = TextStyle::from((FONT, 13).into_font()).color(&BLACK);
        for s in 0..series.len() {
            let color = PALETTE[s % PALETTE.len()];
            let span = |g: usize| {
                let upper = row(g) + 0.4 - s as f64 * band;
                (upper - band + gap, upper - gap)
            };
            chart.draw_series((0..n_groups).filter_map(|g| {
                let v = value(g, s)?;
                let (y0, y1) = span(g);
                Some(Rectangle::new([(0.0, y0), (v, y1)], color.filled()))
            }))?;
            if bar_pixels < 13 {
                continue;
            }
            chart.draw_series((0..n_groups).map(|g| {
                let (y0, y1) = span(g);
                let at = (value(g, s).unwrap_or(0.0), (y0 + y1) / 2.0);
                let (text, dx, anchor, style) = match value(g, s) {
                    Some(v) if v < 0.0 => (number(v), -5, HPos::Right, small.clone()),
                    Some(v) => (number(v), 5, HPos::Left, small.clone()),
                    None => ("n/a".to_owned(), 5, HPos::Left, small.clone().color(&MUTED)),
                };
                EmptyElement::at(at)
                    + Text::new(text, (dx, 0), style.pos(Pos::new(anchor, VPos::Center)))
            }))?;
        }
        Ok(())
    })?;
    write(path, &svg)
}

/// Writes a line chart to `path` (an SVG file; its folder is created when missing).
///
/// One line per series, in the order given, each named in the legend above the plot; points
/// are marked when a series has at most 60 of them. The y axis starts at 0 unless a value is
/// negative. A point whose y is not finite (`f64::NAN`) breaks its line: the series has no
/// value there.
///
/// # Errors
///
/// When the file cannot be written.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> Result<(), Box<dyn Error>> {
    line_chart(
        path,
        title,
        x_label,
        y_label,
        series,
        XAxis::Linear,
        Scale::Linear,
    )
}

/// Writes a line chart like [`lines`], its y axis logarithmic (marked at 1, 2, 5, 10, 20, ...
/// within the range of the values): for series that span orders of magnitude. A point whose y
/// is not above 0, or not finite, breaks its line.
///
/// # Errors
///
/// When the file cannot be written.
pub fn lines_log(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> Result<(), Box<dyn Error>> {
    line_chart(
        path,
        title,
        x_label,
        y_label,
        series,
        XAxis::Linear,
        Scale::Log,
    )
}

/// Writes a line chart of distributions to `path`: each series is a list of (quantile, value)
/// points, the quantile between 0 and 1 (excluded), and the y axis logarithmic, as
/// [`lines_log`]'s. The x axis spreads the quantiles by their nines: p90, p99 and p99.9 are
/// equally far apart, so the tail of a distribution is drawn as wide as its body. It is marked
/// at p0, p50, p90, p99, p99.9 and so on, up to the largest quantile of the series. A point
/// whose quantile is outside 0 to 1, or whose y is not above 0, is left out.
///
/// # Errors
///
/// When the file cannot be written.
pub fn percentiles_log(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> Result<(), Box<dyn Error>> {
    let series: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(name, points)| {
            let kept = points
                .iter()
                .copied()
                .filter(|&(q, _)| (0.0..1.0).contains(&q))
                .collect();
            (*name, kept)
        })
        .collect();
    line_chart(
        path,
        title,
        "percentile",
        y_label,
        &series,
        XAxis::Nines,
        Scale::Log,
    )
}

/// The x axis of a line chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XAxis {
    Linear,
    /// Quantiles, spread by their nines ([`Nines`]).
    Nines,
}

/// The y axis of a line chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    Linear,
    Log,
}

impl Scale {
    /// Whether a y value can be drawn on this scale.
    fn holds(self, y: f64) -> bool {
        y.is_finite() && (self == Self::Linear || y > 0.0)
    }
}

fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    x_axis: XAxis,
    scale: Scale,
) -> Result<(), Box<dyn Error>> {
    let points = || {
        series
            .iter()
            .flat_map(|(_, p)| p.iter().copied())
            .filter(|&(x, y)| x.is_finite() && scale.holds(y))
    };
    let (mut x_lo, mut x_hi) = points()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (x, _)| {
            (a.min(x), b.max(x))
        });
    if x_lo > x_hi {
        (x_lo, x_hi) = (0.0, 1.0);
    } else if x_lo == x_hi {
        (x_lo, x_hi) = (x_lo - 1.0, x_hi + 1.0);
    }
    let (y_min, y_max) = points().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (_, y)| {
        (a.min(y), b.max(y))
    });
    let names: Vec<&str> = series.iter().map(|(name, _)| *name).collect();

    let svg = render((WIDTH, HEIGHT), |root| {
        let body = header(root, title, &names, Swatch::Line)?;
        let x = x_lo..x_hi;
        match scale {
            Scale::Linear => {
                let (y_min, y_max) = if y_min > y_max {
                    (0.0, 1.0)
                } else {
                    (y_min.min(0.0), y_max.max(0.0))
                };
                let span = if y_max > y_min { y_max - y_min } else { 1.0 };
                let y_lo = if y_min < 0.0 {
                    y_min - 0.06 * span
                } else {
                    0.0
                };
                let y = RangedCoordf64::from(y_lo..y_max + 0.06 * span);
                plot_on(&body, x_axis, x, y, x_label, y_label, series, scale)
            }
            Scale::Log => {
                let (y_min, y_max) = if y_min > y_max {
                    (1.0, 10.0)
                } else {
                    (y_min, y_max)
                };
                let y = LogAxis::new(y_min / 1.25..y_max * 1.25);
                plot_on(&body, x_axis, x, y, x_label, y_label, series, scale)
            }
        }
    })?;
    write(path, &svg)
}

/// The plot of a line chart below its header, its x axis over `x` as `x_axis` says.
#[allow(clippy::too_many_arguments)]
fn plot_on<Y>(
    body: &Area<'_>,
    x_axis: XAxis,
    x: std::ops::Range<f64>,
    y: Y,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    scale: Scale,
) -> Result<(), Box<dyn Error>>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let labels = (x_label, y_label);
    match x_axis {
        XAxis::Linear => {
            let x = RangedCoordf64::from(x);
            plot_lines(body, x, &|v| number(*v), y, labels, series, scale)
        }
        XAxis::Nines => {
            let x = Nines::new(x.end);
            plot_lines(body, x, &|q| percentile(*q), y, labels, series, scale)
        }
    }
}

/// The plot of a line chart below its header, on the axes given; `x_format` names the marks
/// of the x axis.
fn plot_lines<X, Y>(
    body: &Area<'_>,
    x: X,
    x_format: &dyn Fn(&f64) -> String,
    y: Y,
    (x_label, y_label): (&str, &str),
    series: &[(&str, Vec<(f64, f64)>)],
    scale: Scale,
) -> Result<(), Box<dyn Error>>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(body)
        .margin_top(6)
        .margin_bottom(10)
        .margin_left(12)
        .margin_right(28)
        .x_label_area_size(52)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(x_format)
        .y_label_formatter(&|v| number(*v))
        .label_style(label_style())
        .axis_desc_style(label_style())
        .light_line_style(WHITE)
        .bold_line_style(GRID)
        .axis_style(BLACK)
        .draw()?;
    for (s, (_, data)) in series.iter().enumerate() {
        let color = PALETTE[s % PALETTE.len()];
        let data: Vec<(f64, f64)> = data
            .iter()
            .copied()
            .filter(|(x, _)| x.is_finite())
            .collect();
        for run in data.split(|&(_, y)| !scale.holds(y)) {
            chart.draw_series(LineSeries::new(run.iter().copied(), color.stroke_width(2)))?;
        }
        if data.len() <= 60 {
            chart.draw_series(
                data.iter()
                    .filter(|&&(_, y)| scale.holds(y))
                    .map(|&p| Circle::new(p, 3, color.filled())),
            )?;
        }
    }
    Ok(())
}

/// A logarithmic y axis over `range` (above 0), marked at 1, 2 and 5 times each power of ten
/// (each power of ten alone when that makes too many marks).
struct LogAxis {
    ln: RangedCoordf64,
    range: std::ops::Range<f64>,
}

impl LogAxis {
    fn new(range: std::ops::Range<f64>) -> Self {
        Self {
            ln: (range.start.ln()..range.end.ln()).into(),
            range,
        }
    }

    fn marks(&self, steps: &[f64]) -> Vec<f64> {
        let std::ops::Range { start, end } = self.range;
        let mut decade = 10f64.powf(start.log10().floor());
        let mut out = Vec::new();
        while decade <= end && out.len() < 64 {
            out.extend(
                steps
                    .iter()
                    .map(|m| m * decade)
                    .filter(|v| (start..=end).contains(v)),
            );
            decade *= 10.0;
        }
        out
    }
}

impl Ranged for LogAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.ln.map(&value.ln(), limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        let marks = self.marks(&[1.0, 2.0, 5.0]);
        if marks.len() <= 12 {
            marks
        } else {
            self.marks(&[1.0])
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.range.clone()
    }
}

impl ValueFormatter<f64> for LogAxis {
    fn format(value: &f64) -> String {
        number(*value)
    }
}

/// An x axis of quantiles from 0 to `end` (below 1), each drawn at its nines, `-log10(1 - q)`:
/// p90 at 1, p99 at 2, p99.9 at 3. Marked at p0, p50 and each nine.
struct Nines {
    axis: RangedCoordf64,
    end: f64,
}

impl Nines {
    /// The axis from p0 to `end`, at least p90 so that it has a nine to show.
    fn new(end: f64) -> Self {
        let end = end.clamp(0.9, 1.0 - 1e-9);
        Self {
            axis: (0.0..nines(end)).into(),
            end,
        }
    }
}

/// How many nines `q` has: 1 for 0.9, 2 for 0.99.
fn nines(q: f64) -> f64 {
    -(1.0 - q).log10()
}

impl Ranged for Nines {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.axis.map(&nines(*value), limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        let mut marks = vec![0.0, 0.5];
        let mut q = 0.9;
        while q <= self.end + 1e-12 && marks.len() < 12 {
            marks.push(q);
            q = 1.0 - (1.0 - q) / 10.0;
        }
        marks
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.end
    }
}

impl ValueFormatter<f64> for Nines {
    fn format(value: &f64) -> String {
        percentile(*value)
    }
}

/// A quantile as a percentile: `p50`, `p99.9`.
fn percentile(q: f64) -> String {
    format!("p{}", number(q * 100.0))
}

/// The vertical axis of a bar chart of `n` groups: group row `r` (from the bottom) is centered
/// on `r`, with one tick there, named by the chart's label formatter.
struct Rows {
    axis: RangedCoordf64,
    n: usize,
}

impl Rows {
    fn new(n: usize) -> Self {
        Self {
            axis: (-0.5..n.max(1) as f64 - 0.5).into(),
            n,
        }
    }
}

impl Ranged for Rows {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.axis.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            (0..self.n).map(|r| r as f64).collect()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.axis.range()
    }
}

impl ValueFormatter<f64> for Rows {
    fn format(value: &f64) -> String {
        number(*value)
    }
}

/// How the legend shows a series' color.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    /// A filled square, for bars.
    Block,
    /// A short line with a dot, for lines.
    Line,
}

fn label_style() -> TextStyle<'static> {
    TextStyle::from((FONT, 15).into_font()).color(&BLACK)
}

/// Draws the title and the legend at the top of `root`; the area left below them.
fn header<'a>(
    root: &Area<'a>,
    title: &str,
    series: &[&str],
    swatch: Swatch,
) -> Result<Area<'a>, Box<dyn Error>> {
    const PAD: i32 = 14;
    const ROW: i32 = 24;
    const MARK: i32 = 16;
    let width = i32::try_from(root.dim_in_pixel().0).unwrap_or(i32::MAX);
    // The largest size up to 22 at which the title fits on one line.
    let mut size = 22;
    while size > 12
        && root.estimate_text_size(title, &title_style(size))?.0 as i32 > width - 2 * PAD
    {
        size -= 1;
    }
    let title_height = root.estimate_text_size(title, &title_style(size))?.1 as i32;
    let text = TextStyle::from((FONT, 15).into_font()).color(&BLACK);

    // The legend's items, laid out in rows that each fit the width.
    let mut rows: Vec<Vec<(usize, i32)>> = vec![Vec::new()];
    let mut used = 0;
    for (s, name) in series.iter().enumerate() {
        let item = MARK + 6 + root.estimate_text_size(name, &text)?.0 as i32 + 22;
        if used > 0 && used + item > width - 2 * PAD {
            rows.push(Vec::new());
            used = 0;
        }
        if let Some(last) = rows.last_mut() {
            last.push((s, item));
        }
        used += item;
    }
    rows.retain(|r| !r.is_empty());
    let legend_top = PAD + title_height + 12;
    let rows_height = i32::try_from(rows.len()).unwrap_or(0) * ROW;
    let (top, body) = root.split_vertically(legend_top + rows_height + 4);

    top.draw(&Text::new(
        title.to_owned(),
        (width / 2, PAD),
        title_style(size).pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    for (r, items) in rows.iter().enumerate() {
        let row_width: i32 = items.iter().map(|(_, w)| w).sum::<i32>() - 22;
        let mut x = (width - row_width) / 2;
        let y = legend_top + i32::try_from(r).unwrap_or(0) * ROW + ROW / 2;
        for &(s, item) in items {
            let color = PALETTE[s % PALETTE.len()];
            match swatch {
                Swatch::Block => top.draw(&Rectangle::new(
                    [(x, y - MARK / 2 + 2), (x + MARK, y + MARK / 2 - 2)],
                    color.filled(),
                ))?,
                Swatch::Line => {
                    top.draw(&PathElement::new(
                        vec![(x, y), (x + MARK, y)],
                        color.stroke_width(2),
                    ))?;
                    top.draw(&Circle::new((x + MARK / 2, y), 3, color.filled()))?;
                }
            }
            top.draw(&Text::new(
                series[s].to_owned(),
                (x + MARK + 6, y),
                text.clone().pos(Pos::new(HPos::Left, VPos::Center)),
            ))?;
            x += item;
        }
    }
    Ok(body)
}

fn title_style(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font().style(FontStyle::Bold)).color(&BLACK)
}

/// Draws on a white canvas of `size` pixels; the SVG text.
fn render(
    size: (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> Result<(), Box<dyn Error>>,
) -> Result<String, Box<dyn Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
    }
    Ok(svg)
}

fn write(path: &Path, svg: &str) -> Result<(), Box<dyn Error>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, svg)?;
    Ok(())
}

/// A number for an axis or a bar: short, without trailing zeros (`1.5k`, `2.5M`, `0.25`).
fn number(v: f64) -> String {
    let a = v.abs();
    let (scaled, decimals, suffix) = if a >= 1e9 {
        (v / 1e9, 2, "G")
    } else if a >= 1e6 {
        (v / 1e6, 2, "M")
    } else if a >= 1e4 {
        (v / 1e3, 1, "k")
    } else if a >= 100.0 {
        (v, 0, "")
    } else if a >= 1.0 {
        (v, 2, "")
    } else {
        (v, 3, "")
    };
    let mut s = format!("{scaled:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_owned();
    }
    if s == "-0" {
        s = "0".to_owned();
    }
    s + suffix
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder of its own under the system's temporary folder, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "courier-bench-charts-{}-{name}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).expect("the chart was written")
    }

    const GROUPS: [&str; 3] = ["retry + rate limit + breaker x3", "cache hit", "deadline"];
    const SERIES: [&str; 3] = ["courier", "tower", "failsafe"];

    fn bar_values() -> Vec<Vec<Option<f64>>> {
        vec![
            vec![Some(412.5), Some(380.0), None],
            vec![Some(95.25), None, None],
            vec![Some(61.0), Some(58.5), Some(1_250.0)],
        ]
    }

    #[test]
    fn grouped_bars_name_every_series_and_group_and_repeat_byte_for_byte() {
        let dir = TempDir::new("bars");
        // A folder that does not exist yet: the writer creates it.
        let first = dir.0.join("nested").join("bars.svg");
        let second = dir.0.join("bars-again.svg");
        let values = bar_values();
        for path in [&first, &second] {
            grouped_bars(
                path,
                "Overhead per call",
                "ns per call",
                &GROUPS,
                &SERIES,
                &values,
            )
            .expect("written");
        }
        let svg = read(&first);
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("Overhead per call"));
        assert!(svg.contains("ns per call"));
        for name in SERIES.iter().chain(&GROUPS) {
            assert!(svg.contains(name), "{name} missing");
        }
        assert!(svg.contains("n/a"), "a missing value is marked");
        assert!(
            svg.contains(">1250<") || svg.contains("1250\n"),
            "values are printed at the bars"
        );
        assert_eq!(svg, read(&second), "the same input, the same bytes");
    }

    #[test]
    fn grouped_bars_refuse_values_of_the_wrong_shape() {
        let dir = TempDir::new("bars-shape");
        let path = dir.0.join("bars.svg");
        let short = vec![vec![Some(1.0)], vec![Some(2.0)]];
        assert!(grouped_bars(&path, "t", "y", &["a", "b"], &["s", "t"], &short).is_err());
        assert!(grouped_bars(&path, "t", "y", &["a"], &["s"], &short).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn lines_name_every_series_and_repeat_byte_for_byte() {
        let dir = TempDir::new("lines");
        let first = dir.0.join("lines.svg");
        let second = dir.0.join("lines-again.svg");
        let series = vec![
            (
                "fixed 1 s",
                (0..10)
                    .map(|k| (f64::from(k), f64::from(50 - 5 * k)))
                    .collect(),
            ),
            (
                "full jitter",
                (0..10)
                    .map(|k| {
                        (
                            f64::from(k),
                            if k == 4 { f64::NAN } else { f64::from(k % 3) },
                        )
                    })
                    .collect::<Vec<_>>(),
            ),
            ("empty", Vec::new()),
        ];
        for path in [&first, &second] {
            lines(path, "Requests per second", "second", "requests", &series).expect("written");
        }
        let svg = read(&first);
        assert!(svg.starts_with("<svg"));
        for text in ["Requests per second", "second", "requests"] {
            assert!(svg.contains(text), "{text} missing");
        }
        for (name, _) in &series {
            assert!(svg.contains(name), "{name} missing");
        }
        assert!(!svg.contains("NaN"), "a missing point breaks the line");
        assert_eq!(svg, read(&second), "the same input, the same bytes");
    }

    #[test]
    fn lines_on_a_log_scale_mark_one_two_five_and_repeat_byte_for_byte() {
        let dir = TempDir::new("lines-log");
        let first = dir.0.join("log.svg");
        let second = dir.0.join("log-again.svg");
        let series = vec![
            (
                "learned rate",
                vec![(0.0, f64::NAN), (1.0, 4.1), (2.0, 90.0), (3.0, 3_600.0)],
            ),
            (
                "requests",
                vec![(0.0, 29.0), (1.0, 0.0), (2.0, 8.0), (3.0, 216.0)],
            ),
        ];
        for path in [&first, &second] {
            lines_log(path, "Recovery", "second", "per second", &series).expect("written");
        }
        let svg = read(&first);
        assert!(svg.starts_with("<svg"));
        for text in ["Recovery", "learned rate", "requests", "per second"] {
            assert!(svg.contains(text), "{text} missing");
        }
        for mark in ["5", "10", "20", "50", "100", "1000"] {
            assert!(svg.contains(&format!("\n{mark}\n")), "mark {mark} missing");
        }
        assert_eq!(svg, read(&second), "the same input, the same bytes");
    }

    #[test]
    fn percentiles_spread_the_tail_mark_each_nine_and_repeat_byte_for_byte() {
        let dir = TempDir::new("percentiles");
        let first = dir.0.join("tail.svg");
        let second = dir.0.join("tail-again.svg");
        let curve = |slow_from: f64| -> Vec<(f64, f64)> {
            (0..=60)
                .map(|k| 1.0 - 10f64.powf(-f64::from(k) / 20.0))
                .map(|q| (q, if q < slow_from { 5.0 } else { 500.0 }))
                .collect()
        };
        let mut out_of_range = curve(0.95);
        out_of_range.push((1.0, 900.0));
        out_of_range.push((-0.5, 1.0));
        let series = vec![("no hedging", out_of_range), ("hedged", curve(0.999))];
        for path in [&first, &second] {
            percentiles_log(path, "Latency by percentile", "ms", &series).expect("written");
        }
        let svg = read(&first);
        assert!(svg.starts_with("<svg"));
        for text in [
            "Latency by percentile",
            "no hedging",
            "hedged",
            "percentile",
            "ms",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        for mark in ["p0", "p50", "p90", "p99", "p99.9"] {
            assert!(svg.contains(&format!("\n{mark}\n")), "mark {mark} missing");
        }
        assert!(!svg.contains("p99.99\n"), "no mark past the last point");
        assert!(!svg.contains("\n1000\n"), "a quantile of 1 is left out");
        assert!(!svg.contains("\n2\n"), "a quantile below 0 is left out");
        assert_eq!(svg, read(&second), "the same input, the same bytes");
    }

    #[test]
    fn the_nines_axis_puts_each_nine_one_step_further() {
        let axis = Nines::new(0.999);
        let at = |q: f64| axis.map(&q, (0, 300));
        assert_eq!(at(0.0), 0);
        assert_eq!(at(0.9), 100);
        assert_eq!(at(0.99), 200);
        assert_eq!(at(0.999), 300);
        assert_eq!(percentile(0.5), "p50");
        assert_eq!(percentile(0.999), "p99.9");
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(-0.0001), "0");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(5.0), "5");
        assert_eq!(number(17.19), "17.19");
        assert_eq!(number(412.4), "412");
        assert_eq!(number(12_500.0), "12.5k");
        assert_eq!(number(2_500_000.0), "2.5M");
        assert_eq!(number(-40.0), "-40");
    }

    #[test]
    fn the_chart_folder_is_docs_bench_at_the_workspace_root() {
        let dir = chart_dir();
        assert!(dir.ends_with("docs/bench"), "{}", dir.display());
        let root = dir.parent().and_then(Path::parent).expect("a root");
        assert!(root.join("Cargo.toml").is_file(), "{}", root.display());
        assert!(root.join("crates").join("courier-bench").is_dir());
    }
}
