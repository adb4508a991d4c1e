//! The overview's throughput chart: runs finished per minute over the last
//! hour, as a server-rendered SVG (no chart library, no CDN), stacked by
//! how the runs ended.

use leptos::prelude::*;

use crate::components::time::exact;
use domain::views::MinuteCount;

const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 120.0;

#[component]
pub fn ThroughputChart(minutes: Vec<MinuteCount>) -> impl IntoView {
    let total: i64 = minutes.iter().map(MinuteCount::total).sum();
    let peak = minutes.iter().map(MinuteCount::total).max().unwrap_or(0);
    let slot = WIDTH / minutes.len().max(1) as f64;
    let scale = if peak > 0 { HEIGHT / peak as f64 } else { 0.0 };
    let bars = minutes
        .into_iter()
        .enumerate()
        .filter(|(_, m)| m.total() > 0)
        .map(|(i, m)| {
            let x = i as f64 * slot + 1.0;
            let w = (slot - 2.0).max(1.0);
            // Stacked from the bottom: done, then failed, then canceled.
            let mut top = HEIGHT;
            let mut part = |n: i64, class: &'static str| {
                let h = n as f64 * scale;
                top -= h;
                (n > 0).then(|| {
                    view! { <rect x=x y=top width=w height=h class=class></rect> }
                })
            };
            let done = part(m.done, "fill-emerald-500");
            let failed = part(m.failed, "fill-red-600");
            let canceled = part(m.canceled, "fill-orange-500");
            let label = format!(
                "{}: {} done, {} failed, {} canceled",
                exact(m.minute),
                m.done,
                m.failed,
                m.canceled
            );
            view! {
                <g>
                    <title>{label}</title>
                    {done}
                    {failed}
                    {canceled}
                </g>
            }
        })
        .collect_view();
    view! {
        <figure class="space-y-2">
            <svg
                id="throughput-chart"
                viewBox=format!("0 0 {WIDTH} {HEIGHT}")
                preserveAspectRatio="none"
                class="h-32 w-full rounded-sm bg-slate-50"
                role="img"
                aria-label=format!(
                    "{total} runs finished in the last hour; busiest minute {peak}",
                )
            >
                {bars}
            </svg>
            <figcaption class="flex flex-wrap justify-between gap-2 text-xs text-slate-600">
                <span>"60 min ago"</span>
                <span class="flex gap-3">
                    <span class="flex items-center gap-1">
                        <span class="inline-block h-2 w-2 rounded-sm bg-emerald-500"></span>
                        "done"
                    </span>
                    <span class="flex items-center gap-1">
                        <span class="inline-block h-2 w-2 rounded-sm bg-red-600"></span>
                        "failed"
                    </span>
                    <span class="flex items-center gap-1">
                        <span class="inline-block h-2 w-2 rounded-sm bg-orange-500"></span>
                        "canceled"
                    </span>
                    <span>{format!("peak {peak}/min")}</span>
                </span>
                <span>"now"</span>
            </figcaption>
        </figure>
    }
}
