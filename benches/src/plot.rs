//! SVG charts for `report.html`, drawn with plotters' SVG backend (no font files needed):
//!
//! - latency by percentile: x is the percentile on HdrHistogram's usual log axis of 1/(1-p) (so 90%, 99%,
//!   99.9%... are equally spaced), y is latency in ns on a log scale; one line per histogram;
//! - throughput against subscriber count: records/s for each subscriber count, with the decode-only rate of
//!   the same capture as a flat reference line.

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

/// Latency by percentile for `series` (name, histogram in ns).
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
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let x_max = points.iter().map(|p| p.0).max().unwrap_or(1).max(2) as f64;
        let y_max = points.iter().map(|p| p.1).chain(reference.map(|r| r.1)).fold(1.0, f64::max);
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
            .y_desc("records/s")
            .x_labels(points.len().max(2))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{:.1}M", y / 1e6))
            .draw()
            .map_err(plot_err)?;
        let line: Vec<(f64, f64)> = points.iter().map(|&(n, r)| (n as f64, r)).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), COLORS[1].stroke_width(2)))
            .map_err(plot_err)?
            .label("mdfan replay + normalize + fan-out")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], COLORS[1].stroke_width(2)));
        chart.draw_series(line.iter().map(|&p| Circle::new(p, 4, COLORS[1].filled()))).map_err(plot_err)?;
        if let Some((name, rate)) = reference {
            chart
                .draw_series(LineSeries::new(vec![(0.5, rate), (x_max + 0.5, rate)], COLORS[0].stroke_width(1)))
                .map_err(plot_err)?
                .label(name)
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], COLORS[0].stroke_width(1)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

fn trim(p: f64) -> String {
    let s = format!("{p:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {e:?}")
}

/// An HTML page: title, context, the charts (inline SVG), targets and figures tables.
pub fn html(
    context: &serde_json::Value,
    charts: &[(String, String)],
    targets: &[crate::report::Target],
    figures: &std::collections::BTreeMap<String, f64>,
) -> String {
    let mut h = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>mdfan-bench report</title>\n<style>\
         body{font-family:sans-serif;margin:2em;max-width:1000px}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px}td.n{text-align:right}\
         .met{color:#080}.missed{color:#b00}code{font-size:12px}</style></head><body>\n<h1>mdfan-bench report</h1>\n",
    );
    let _ = writeln!(h, "<p><code>{}</code></p>", escape(&context.to_string()));
    h.push_str("<h2>Targets</h2>\n<table><tr><th>target</th><th>limit</th><th>measured</th><th>verdict</th></tr>\n");
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
            escape(&t.what),
            escape(&t.key),
            t.limit,
            t.verdict()
        );
    }
    h.push_str("</table>\n");
    for (title, svg) in charts {
        let _ = writeln!(h, "<h2>{}</h2>\n{svg}", escape(title));
    }
    h.push_str("<h2>Figures</h2>\n<table><tr><th>figure</th><th>value</th></tr>\n");
    for (k, v) in crate::report::in_reading_order(figures) {
        let _ = writeln!(h, "<tr><td><code>{}</code></td><td class=n>{}</td></tr>", escape(k), {
            crate::report::fmt_value(k, *v)
        });
    }
    h.push_str("</table>\n</body></html>\n");
    h
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
