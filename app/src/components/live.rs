//! Live refresh without a reload: a counter that ticks in the browser and
//! that resources use as their source, so each tick refetches them.

use std::time::Duration;

use leptos::prelude::*;

/// How often live pages refetch.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// A signal that increments every `every` once the page is hydrated, but
/// not while the tab is hidden: a dashboard left open in a background tab
/// costs the server nothing. The first tick after the tab shows again
/// brings the page up to date.
///
/// The timer lives in an effect, so it never starts on the server (nor
/// without the wasm bundle: then the page is a plain document, refreshed by
/// reloading) and is cleared when the page that asked for it goes away.
pub fn use_tick(every: Duration) -> ReadSignal<u64> {
    let (tick, set_tick) = signal(0u64);
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || {
                if !document().hidden() {
                    set_tick.update(|t| *t += 1);
                }
            },
            every,
        )
        .ok();
        on_cleanup(move || {
            if let Some(handle) = handle {
                handle.clear();
            }
        });
    });
    tick
}
