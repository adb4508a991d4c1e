//! `/deliveries`: webhook notifications, each with every attempt.

use leptos::prelude::*;

use crate::components::feed::Feed;
use crate::components::live::use_live;
use crate::components::loaded::loaded;
use crate::components::notice::EmptyState;
use crate::components::tables::DeliveryTable;
use crate::error::DashboardError;
use domain::views::DeliveriesPage;

/// The latest 200 deliveries.
#[server(prefix = "/_fn", endpoint = "deliveries")]
pub async fn load_deliveries() -> Result<DeliveriesPage, DashboardError> {
    crate::backend::source()?.deliveries(200).await
}

#[component]
pub fn DeliveriesListPage() -> impl IntoView {
    let live = use_live(|| Feed::Deliveries);
    let data = Resource::new(
        move || live.track(),
        move |_| live.or_fetch(load_deliveries()),
    );
    view! {
        <section class="space-y-4">
            <h1 class="text-2xl font-semibold tracking-tight">"Webhook deliveries"</h1>
            <p class="max-w-3xl text-sm text-slate-700">
                "One notification per plan outcome (failed, or completed) and destination, retried with backoff until the receiver answers 2xx. The latest 200."
            </p>
            {loaded(
                data,
                |p| {
                    if p.deliveries.is_empty() {
                        view! {
                            <EmptyState id="deliveries-empty">
                                "No notification sent yet. Set BATON_WEBHOOK_URL or a plan's webhooks to be told when a plan fails or completes."
                            </EmptyState>
                        }
                            .into_any()
                    } else {
                        view! { <DeliveryTable deliveries=p.deliveries now=p.now /> }.into_any()
                    }
                },
            )}
        </section>
    }
}
