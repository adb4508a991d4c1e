//! `/replicas`: every process with a heartbeat row (replicas and agents),
//! alive or stale, what each runs, and which one leads.

use leptos::prelude::*;

use crate::components::feed::Feed;
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::notice::EmptyState;
use crate::components::tables::ReplicaTable;
use crate::error::DashboardError;
use domain::views::ReplicasPage;

#[server(prefix = "/_fn", endpoint = "replicas")]
pub async fn load_replicas() -> Result<ReplicasPage, DashboardError> {
    crate::backend::source()?.replicas().await
}

#[component]
pub fn ReplicasListPage() -> impl IntoView {
    let live = use_live(|| Feed::Replicas);
    let data = Resource::new(
        move || live.track(),
        move |_| live.or_fetch(load_replicas()),
    );
    view! {
        <section class="space-y-4">
            <h1 class="text-2xl font-semibold tracking-tight">"Replicas and agents"</h1>
            <p class="max-w-3xl text-sm text-slate-700">
                "Each replica and each agent (baton agent, a worker on another machine) writes a heartbeat; one that stops is marked stale after BATON_STALE_AFTER and its runs are failed over. The leader promotes waiting runs and sweeps."
            </p>
            {loaded(
                data,
                |p| {
                    if p.replicas.is_empty() {
                        view! { <EmptyState id="replicas-empty">"No replica has written a heartbeat yet: start one with baton serve."</EmptyState> }
                            .into_any()
                    } else {
                        view! { <ReplicaTable replicas=p.replicas now=p.now /> }.into_any()
                    }
                },
            )}
        </section>
    }
}
