//! The one way pages show data that loads and refreshes: the last good
//! value stays on screen while the next one loads (no flicker every two
//! seconds), an error is shown in its place, and a missing plan or run
//! becomes the 404 page.

use leptos::prelude::*;
use serde::{Serialize, de::DeserializeOwned};

use crate::components::notice::{ErrorNotice, NotFound};
use crate::error::DashboardError;

pub fn loaded<T>(
    resource: Resource<Result<T, DashboardError>>,
    render: impl Fn(T) -> AnyView + Send + Sync + 'static,
) -> impl IntoView
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
{
    view! {
        <Transition fallback=|| view! { <p class="text-sm text-slate-600">"Loading…"</p> }>
            {move || {
                resource
                    .get()
                    .map(|result| match result {
                        Ok(value) => render(value),
                        Err(DashboardError::NotFound(what)) => view! { <NotFound what /> }.into_any(),
                        Err(error) => view! { <ErrorNotice error /> }.into_any(),
                    })
            }}
        </Transition>
    }
}
