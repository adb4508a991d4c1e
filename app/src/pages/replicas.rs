//! `/replicas`: every process with a heartbeat row (replicas and agents),
//! alive or stale, what each runs, which one leads, and the operator's
//! drain of each.

use leptos::prelude::*;

use crate::components::actions::outcome;
use crate::components::drain::WorkerAct;
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
    let action = ServerAction::<WorkerAct>::new();
    let live = use_live(|| Feed::Replicas);
    let data = Resource::new(
        move || (live.track(), action.version().get()),
        move |_| live.or_fetch(load_replicas()),
    );
    view! {
        <section class="space-y-4">
            <h1 class="text-2xl font-semibold tracking-tight">"Replicas and agents"</h1>
            <p class="max-w-3xl text-sm text-slate-700">
                "Each replica and each agent (baton agent, a worker on another machine) writes a heartbeat; one that stops is marked stale after BATON_STALE_AFTER and its runs are failed over. The leader promotes waiting runs and sweeps. Drain takes one out of service: it takes no new run and finishes those it has."
            </p>
            <div id="action-result" role="status" aria-live="polite">
                {move || action.value().get().map(outcome)}
            </div>
            {loaded(
                data,
                move |p| {
                    if p.replicas.is_empty() {
                        view! { <EmptyState id="replicas-empty">"No replica has written a heartbeat yet: start one with baton serve."</EmptyState> }
                            .into_any()
                    } else {
                        view! { <ReplicaTable replicas=p.replicas now=p.now drain=action /> }
                            .into_any()
                    }
                },
            )}
        </section>
    }
}
