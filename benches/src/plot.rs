//! SVG charts for `report.html`, drawn with plotters' SVG backend (no font files needed), their legends in
//! human names ([`crate::report::display_name`]):
//!
//! - latency by percentile: x is the percentile on HdrHistogram's usual log axis of 1/(1-p) (so 90%, 99%,
//!   99.9%... are equally spaced), y is latency in ns on a log scale; one line per histogram;
//! - throughput against subscriber count: records/s for each subscriber count, with the decode-only rate of
//!   the same capture as a flat reference line;
//! - fan-out cost against subscriber count: ns per record for the hot loop, the 64-byte store limit and the
//!   subscriber side.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use plotters::prelude::*;

const COLORS: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];

/// (1/(1-p), ns) points of `h` from p = 0 up to its last recorded value, at most 10^6 on the x axis.
fn percentile_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        if q >= 1.0 {
            break;
        }
        pts.push((1.0 / (1.0 - q), v.value_iterated_to().max(1) as f64));
    }
    if let Some(&(x, _)) = pts.last() {
        pts.push(((x * 2.0).min(1e6), h.max().max(1) as f64));
    }
    pts
}

/// Latency by percentile for `series` (legend name, histogram in ns; the caller gives
/// [`crate::report::display_name`]s).
pub fn latency_by_percentile(title: &str, series: &[(&str, &Histogram<u64>)]) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let all: Vec<Vec<(f64, f64)>> = series.iter().map(|(_, h)| percentile_points(h)).collect();
        let x_max = all.iter().flatten().map(|p| p.0).fold(10.0, f64::max);
        let y_min = all.iter().flatten().map(|p| p.1).fold(f64::MAX, f64::min).min(1e9);
        let y_max = all.iter().flatten().map(|p| p.1).fold(10.0, f64::max);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((1.0..x_max * 1.2).log_scale(), ((y_min * 0.8).max(1.0)..y_max * 1.5).log_scale())
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("percentile")
            .y_desc("latency (ns)")
            .x_label_formatter(&|x| {
                let p = 100.0 * (1.0 - 1.0 / x);
                if p < 1.0 {
                    "0%".into()
                } else {
                    format!("{}%", trim(p))
                }
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(plot_err)?;
        for (i, ((name, _), pts)) in series.iter().zip(all).enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(plot_err)?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// Records/s against subscriber count, with `reference` (name, rate) drawn flat.
pub fn throughput(title: &str, points: &[(usize, f64)], reference: Option<(&str, f64)>) -> anyhow::Result<String> {
    let series = [(crate::report::display_name("mdfan.replay"), points.to_vec())];
    let axis = YAxis { desc: "records/s", label: &|y| format!("{:.1}M", y / 1e6) };
    by_subscribers(title, &axis, &series, reference, SeriesLabelPosition::LowerLeft)
}

/// Cost per record (ns) against subscriber count: one line per series (legend name, points), from zero.
pub fn cost_by_subscribers(title: &str, series: &[(String, Vec<(usize, f64)>)]) -> anyhow::Result<String> {
    let axis = YAxis { desc: "ns per record", label: &|y| format!("{y:.0}") };
    by_subscribers(title, &axis, series, None, SeriesLabelPosition::UpperLeft)
}

/// The y axis of a chart against subscriber count: its description and tick labels.
struct YAxis<'a> {
    desc: &'a str,
    label: &'a dyn Fn(&f64) -> String,
}

/// Lines against subscriber count on linear axes from zero, one per series (legend name, points; colours from
/// the second on), with `reference` (name, value) drawn flat in black.
fn by_subscribers(
    title: &str,
    axis: &YAxis<'_>,
    series: &[(String, Vec<(usize, f64)>)],
    reference: Option<(&str, f64)>,
    legend: SeriesLabelPosition,
) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let pts = series.iter().flat_map(|(_, p)| p.iter());
        let x_max = pts.clone().map(|p| p.0).max().unwrap_or(1).max(2) as f64;
        let y_max = pts.map(|p| p.1).chain(reference.map(|r| r.1)).fold(1.0, f64::max);
        let x_labels = series.iter().map(|(_, p)| p.len()).max().unwrap_or(0).max(2);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0.5..x_max + 0.5, 0.0..y_max * 1.15)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("subscribers")
            .y_desc(axis.desc)
            .x_labels(x_labels)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(axis.label)
            .draw()
            .map_err(plot_err)?;
        for (i, (name, points)) in series.iter().enumerate() {
            let color = COLORS[(i + 1) % COLORS.len()];
            let line: Vec<(f64, f64)> = points.iter().map(|&(n, v)| (n as f64, v)).collect();
            chart
                .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
            chart.draw_series(line.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(plot_err)?;
        }
        if let Some((name, value)) = reference {
            chart
                .draw_series(LineSeries::new(vec![(0.5, value), (x_max + 0.5, value)], COLORS[0].stroke_width(1)))
                .map_err(plot_err)?
                .label(name)
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], COLORS[0].stroke_width(1)));
        }
        chart
            .configure_series_labels()
            .position(legend)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {e:?}")
}

fn trim(p: f64) -> String {
    let s = format!("{p:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// What a chart shows, which decides where `report.html` puts it (after the tables it illustrates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChartKind {
    /// One-way latency by percentile of the ping-pong variants.
    Latency,
    /// The open loop's stages at one rate.
    OpenLoop,
    /// Replay throughput by subscriber count.
    Throughput,
    /// Fan-out cost per record by subscriber count, with the 64-byte store limit.
    Fanout,
}

/// A chart of the report: `chart-<n>.svg`, and inline in `report.html`.
pub struct Chart {
    pub kind: ChartKind,
    pub title: String,
    pub svg: String,
}

/// `report.html`: the run's context and the headline tables of [`crate::tables`], each chart after the tables it
/// illustrates, the targets, then every figure under its key. No script, no external resource.
pub fn html(
    context: &serde_json::Value,
    charts: &[Chart],
    targets: &[crate::report::Target],
    figures: &std::collections::BTreeMap<String, f64>,
) -> String {
    use crate::tables;
    let mut h = String::from(
        "<!doctype html>\n<html lang=en><head><meta charset=\"utf-8\"><title>mdfan-bench report</title>\n<style>\
         body{font-family:sans-serif;margin:2em;max-width:1000px}table{border-collapse:collapse;margin-bottom:1em}\
         td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px}th{background:#f4f4f4}\
         th[scope=row]{text-align:left;font-weight:normal;background:none}.n{text-align:right}\
         .note{color:#444;font-size:14px}.met{color:#080}.missed{color:#b00}code{font-size:12px}</style></head><body>\n\
         <h1>mdfan-bench report</h1>\n",
    );
    let charts_of = |kind: ChartKind| {
        charts.iter().filter(move |c| c.kind == kind).fold(String::new(), |mut out, c| {
            let _ = writeln!(out, "<h2>{}</h2>\n{}", tables::escape(&c.title), c.svg);
            out
        })
    };
    // every table summary.md has, in its order, each chart after the table it draws
    for t in tables::all(context, figures) {
        h.push_str(&t.html());
        let kind = match t.title.as_str() {
            "One-way latency" => Some(ChartKind::Latency),
            "Replay throughput" => Some(ChartKind::Throughput),
            "Fan-out scaling" => Some(ChartKind::Fanout),
            "Open loop" => Some(ChartKind::OpenLoop),
            _ => None,
        };
        if let Some(kind) = kind {
            h.push_str(&charts_of(kind));
        }
    }
    h.push_str("<h2>Targets</h2>\n<table><tr><th>target</th><th class=n>limit</th><th class=n>measured</th><th>verdict</th></tr>\n");
    for t in targets {
        let class = match t.met() {
            Some(true) => "met",
            Some(false) => "missed",
            None => "",
        };
        let v = t.value.map_or("-".into(), |v| format!("{v:.2}"));
        let _ = writeln!(
            h,
            "<tr><td>{}<br><code>{}</code></td><td class=n>{:.2}</td><td class=n>{v}</td><td class={class}>{}</td></tr>",
            tables::escape(&t.what),
            tables::escape(&t.key),
            t.limit,
            t.verdict()
        );
    }
    h.push_str(
        "</table>\n<h2>All figures</h2>\n<p class=note>Every figure under its <code>summary.json</code> key \
                (ns unless the key says otherwise).</p>\n<table><tr><th>figure</th><th class=n>value</th></tr>\n",
    );
    for (k, v) in crate::report::in_reading_order(figures) {
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td class=n>{}</td></tr>",
            tables::escape(k),
            crate::report::fmt_value(k, *v)
        );
    }
    h.push_str("</table>\n</body></html>\n");
    h
}
