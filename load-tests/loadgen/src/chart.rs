//! The `chart` command: an SVG of call latency (p50 and p99) against call rate, drawn from the
//! JSON lines of `calls` runs (one line per rate). Plain SVG text, no plotting library.

use std::fmt::Write as _;

use serde_json::Value;

use crate::cli::ChartArgs;
use crate::error::LoadError;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 180.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Width of the plot area, between the margins.
const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;
/// Height of the plot area, between the margins.
const PLOT_HEIGHT: f64 = HEIGHT - TOP - BOTTOM;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// One line of the chart's data: a named set of runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// (calls per second, p50 ms, p99 ms), sorted by rate.
    pub points: Vec<(f64, f64, f64)>,
}

/// Reads the `calls` JSON lines of `text` (other lines are skipped) into a series. A run that
/// skipped calls (its in-flight bound reached: the gateway saturated) is left out: its
/// percentiles describe the bound, not the gateway, and would flatten the rest of the chart.
pub fn series(label: &str, text: &str) -> Series {
    let mut points: Vec<(f64, f64, f64)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["skipped"].as_u64().unwrap_or(0) == 0)
        .filter_map(|v| {
            let rate = v["rate"].as_f64()?;
            let p50 = v["p50_us"].as_f64()? / 1000.0;
            let p99 = v["p99_us"].as_f64()? / 1000.0;
            Some((rate, p50, p99))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    Series {
        label: label.to_owned(),
        points,
    }
}

/// A round step for axis ticks covering `max` in about five steps.
fn step(max: f64) -> f64 {
    let raw = (max / 5.0).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG document: p50 solid, p99 dashed, one color per series, with `limit_ms` drawn as a
/// horizontal line when it falls inside the plot.
pub fn render(title: &str, all: &[Series], limit_ms: Option<f64>) -> String {
    let axes = Axes::fit(all);
    let mut svg = String::new();
    heading(&mut svg, title);
    latency_grid(&mut svg, &axes);
    rate_grid(&mut svg, &axes);
    axis_titles(&mut svg);
    if let Some(limit) = limit_ms.filter(|l| *l <= axes.y_top) {
        limit_line(&mut svg, &axes, limit);
    }
    for (k, s) in all.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        curves(&mut svg, &axes, s, color);
        legend(&mut svg, k, &s.label, color);
    }
    svg.push_str("</svg>\n");
    svg
}

/// The plot's scales: round tick steps and axis tops that hold every point.
#[derive(Debug)]
struct Axes {
    /// Tick step of the rate axis.
    xs: f64,
    /// Tick step of the latency axis.
    ys: f64,
    /// Highest rate on the axis.
    x_top: f64,
    /// Highest latency on the axis (ms).
    y_top: f64,
}

impl Axes {
    /// Scales for `all`, with room above the highest p99.
    fn fit(all: &[Series]) -> Self {
        let max_rate = all
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .fold(0.0, f64::max);
        let max_ms = all
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.2))
            .fold(0.0, f64::max);
        let (xs, ys) = (step(max_rate.max(1.0)), step((max_ms * 1.1).max(0.1)));
        let x_top = (max_rate / xs).ceil().max(1.0) * xs;
        let y_top = (max_ms * 1.1 / ys).ceil().max(1.0) * ys;
        Self {
            xs,
            ys,
            x_top,
            y_top,
        }
    }

    /// Horizontal position of a rate.
    fn x(&self, r: f64) -> f64 {
        LEFT + r / self.x_top * PLOT_WIDTH
    }

    /// Vertical position of a latency in ms.
    fn y(&self, ms: f64) -> f64 {
        TOP + PLOT_HEIGHT - ms / self.y_top * PLOT_HEIGHT
    }
}

/// The document's opening tag, background and title.
fn heading(svg: &mut String, title: &str) {
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r##"<rect width="100%" height="100%" fill="#ffffff"/><text x="{LEFT}" y="22" font-size="15">{}</text>"##,
        escape(title)
    );
}

/// Horizontal grid lines with their latency labels.
fn latency_grid(svg: &mut String, axes: &Axes) {
    let mut tick = 0.0;
    while tick <= axes.y_top + axes.ys / 2.0 {
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#dddddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{tick}</text>"##,
            LEFT + PLOT_WIDTH,
            axes.y(tick),
            axes.y(tick),
            LEFT - 6.0,
            axes.y(tick) + 4.0
        );
        tick += axes.ys;
    }
}

/// Vertical grid lines with their rate labels.
fn rate_grid(svg: &mut String, axes: &Axes) {
    let mut tick = 0.0;
    while tick <= axes.x_top + axes.xs / 2.0 {
        let _ = writeln!(
            svg,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{TOP}" y2="{:.1}" stroke="#eeeeee"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{tick}</text>"##,
            axes.x(tick),
            axes.x(tick),
            TOP + PLOT_HEIGHT,
            axes.x(tick),
            TOP + PLOT_HEIGHT + 16.0
        );
        tick += axes.xs;
    }
}

/// The names of both axes.
fn axis_titles(svg: &mut String) {
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">calls per second</text><text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">round trip (ms)</text>"##,
        LEFT + PLOT_WIDTH / 2.0,
        HEIGHT - 10.0,
        TOP + PLOT_HEIGHT / 2.0
    );
}

/// The dotted line of the latency limit, labelled.
fn limit_line(svg: &mut String, axes: &Axes, limit: f64) {
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#888888" stroke-dasharray="2 4"/><text x="{:.1}" y="{:.1}" fill="#666666">{limit} ms</text>"##,
        LEFT + PLOT_WIDTH,
        axes.y(limit),
        axes.y(limit),
        LEFT + PLOT_WIDTH + 4.0,
        axes.y(limit) + 4.0
    );
}

/// One series' p50 (solid) and p99 (dashed) lines, a dot on each point.
fn curves(svg: &mut String, axes: &Axes, s: &Series, color: &str) {
    for (which, dash) in [(1, ""), (2, r#" stroke-dasharray="6 4""#)] {
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|p| {
                let ms = if which == 1 { p.1 } else { p.2 };
                format!("{:.1},{:.1}", axes.x(p.0), axes.y(ms))
            })
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
            pts.join(" ")
        );
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(svg, r#"<circle cx="{px}" cy="{py}" r="3" fill="{color}"/>"#);
        }
    }
}

/// The legend entry of series `k`: a solid p50 sample and a dashed p99 sample.
fn legend(svg: &mut String, k: usize, label: &str, color: &str) {
    let ly = TOP + 30.0 + k as f64 * 40.0;
    let lx = LEFT + PLOT_WIDTH + 15.0;
    let _ = writeln!(
        svg,
        r#"<line x1="{lx}" x2="{:.1}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{} p50</text>"#,
        lx + 20.0,
        lx + 25.0,
        ly + 4.0,
        escape(label)
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{lx}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}">{} p99</text>"#,
        lx + 20.0,
        ly + 16.0,
        ly + 16.0,
        lx + 25.0,
        ly + 20.0,
        escape(label)
    );
}

/// Reads every `--series LABEL=FILE`, writes the SVG to `--output`.
pub fn run(args: &ChartArgs) -> Result<(), LoadError> {
    let mut all = Vec::new();
    for spec in &args.series {
        let (label, path) = spec
            .split_once('=')
            .ok_or_else(|| LoadError::Args(format!("--series {spec}: expected LABEL=FILE")))?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| LoadError::Args(format!("--series {spec}: {e}")))?;
        let s = series(label, &text);
        if s.points.is_empty() {
            return Err(LoadError::Args(format!(
                "--series {spec}: no calls results in the file"
            )));
        }
        all.push(s);
    }
    let svg = render(&args.title, &all, args.limit_ms);
    std::fs::write(&args.output, svg)
        .map_err(|e| LoadError::Local(format!("writing {}: {e}", args.output)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_reads_calls_lines_and_skips_the_rest() {
        let text = "{\"rate\":2000,\"p50_us\":500,\"p99_us\":1500}\ncalls: 2000 sent\n{\"rate\":1000,\"p50_us\":400,\"p99_us\":1200}\n{\"rate\":9000,\"p50_us\":400000,\"p99_us\":500000,\"skipped\":3}\n";
        let s = series("one node", text);
        assert_eq!(s.points, vec![(1000.0, 0.4, 1.2), (2000.0, 0.5, 1.5)]);
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(step(6000.0), 2000.0);
        assert_eq!(step(4.4), 1.0);
        assert_eq!(step(22.0), 5.0);
    }

    #[test]
    fn the_svg_has_a_line_per_percentile_and_escapes_text() {
        let s = series("a<b", "{\"rate\":1000,\"p50_us\":400,\"p99_us\":1200}");
        let svg = render("latency & rate", &[s], Some(1.0));
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("latency &amp; rate") && svg.contains("a&lt;b p99"));
        assert!(svg.contains(">1 ms</text>"), "the limit is labelled");
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
