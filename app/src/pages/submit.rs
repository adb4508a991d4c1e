//! `/plans/new`: paste or upload a plan file (YAML or JSON). An invalid
//! plan is answered next to the field it names and nothing is stored; a
//! valid one opens its plan page.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::components::loaded::loaded;
use crate::components::notice::FieldError;
use crate::components::session::may_act;
use crate::components::tables::LINK;
use crate::error::DashboardError;

/// Validates and stores the plan in `plan`, then sends the browser to it.
#[server(prefix = "/_fn", endpoint = "submit_plan")]
pub async fn submit_plan(plan: String) -> Result<i64, DashboardError> {
    let who = crate::backend::identity()?;
    let id = crate::backend::source()?.submit(&who, &plan).await?;
    leptos_axum::redirect(&format!("/plans/{id}"));
    Ok(id)
}

const EXAMPLE: &str = "name: release-42
parallel_limit: 2
tasks:
  - name: migrate-orders
    target: db/orders
    version: \"0042\"
    command: {argv: [sh, -c, \"echo migrating\"]}
  - name: warm-cache
    target: cache/eu
    exclusive: false
    sleep: 2s";

/// Plan `id` as a YAML file to submit again ("Submit again…" on a plan's
/// page). It carries the plan's secrets, so only operators may read it.
#[server(prefix = "/_fn", endpoint = "export_plan")]
pub async fn export_plan(id: i64) -> Result<String, DashboardError> {
    let who = crate::backend::identity()?;
    crate::backend::source()?.export(&who, id).await
}

#[component]
pub fn SubmitPage() -> impl IntoView {
    let query = use_query_map();
    let from = move || query.read().get("from").and_then(|v| v.parse::<i64>().ok());
    // Only an operator's page asks: a viewer's would be refused anyway.
    let exported = Resource::new(
        move || from().filter(|_| may_act()),
        |from| async move {
            match from {
                Some(id) => export_plan(id).await.map(|text| Some((id, text))),
                None => Ok(None),
            }
        },
    );
    view! {
        <Title text="Submit a plan · Baton" />
        <section class="max-w-3xl space-y-4">
            <h1 class="text-2xl font-semibold tracking-tight">"Submit a plan"</h1>
            <p class="text-sm text-slate-700">
                "Paste a plan file, YAML or JSON (the same fields as POST /api/v1/plans), or load one from disk. Nothing is stored unless the whole plan is valid."
            </p>
            <Show
                when=may_act
                fallback=|| view! {
                    <p id="submit-viewer" class="rounded-sm border border-slate-300 bg-white px-3 py-2 text-sm text-slate-700">
                        "You are signed in as a viewer: only operators can submit plans."
                    </p>
                }
            >
                {loaded(exported, |copy| view! { <SubmitForm copy /> }.into_any())}
            </Show>
        </section>
    }
}

/// The form, filled with `copy` (a plan's id and its file) when the
/// operator came to submit that plan again.
#[component]
fn SubmitForm(copy: Option<(i64, String)>) -> impl IntoView {
    let action = ServerAction::<SubmitPlan>::new();
    let (from, initial) = match copy {
        Some((id, text)) => (Some(id), text),
        None => (None, String::new()),
    };
    let text = RwSignal::new(initial.clone());
    let error = move || match action.value().get() {
        Some(Err(e)) => Some(e),
        _ => None,
    };
    let invalid = move || error().is_some();
    let note = from.map(|id| {
        view! {
            <p id="submit-copy" class="rounded-sm border border-slate-300 bg-white px-3 py-2 text-sm text-slate-700">
                <a class=LINK href=format!("/plans/{id}")>{format!("Plan {id}")}</a>
                ", as a file: edit what should differ, then submit it as a new plan. It holds the plan's secrets (environment values, headers, webhook secrets)."
            </p>
        }
    });
    view! {
        {note}
        <ActionForm action attr:id="submit-form" attr:class="space-y-3">
            <div class="flex flex-col gap-1">
                <label for="plan-text" class="text-sm font-medium text-slate-800">"Plan file"</label>
                // The text is also the element's content, so the copy shows
                // before (and without) JavaScript.
                <textarea
                    id="plan-text"
                    name="plan"
                    rows="16"
                    required
                    spellcheck="false"
                    placeholder=EXAMPLE
                    aria-invalid=move || invalid().to_string()
                    aria-describedby="plan-error"
                    class="w-full rounded-sm border border-slate-400 bg-white p-2 font-mono text-sm aria-[invalid=true]:border-red-600"
                    prop:value=move || text.get()
                    on:input=move |ev| text.set(event_target_value(&ev))
                >
                    {initial}
                </textarea>
            </div>
            <div id="plan-error" aria-live="polite">
                {move || error().map(|e| view! { <FieldError error=e /> })}
            </div>
            <div class="flex flex-wrap items-center gap-3">
                <button
                    type="submit"
                    class="rounded-sm bg-blue-700 px-4 py-1.5 text-sm font-medium text-white hover:bg-blue-800 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-blue-600 disabled:opacity-60"
                    disabled=move || action.pending().get()
                >
                    {move || if action.pending().get() { "Submitting…" } else { "Submit plan" }}
                </button>
                <label class="text-sm text-slate-700">
                    "or load a file "
                    <input
                        id="plan-file"
                        type="file"
                        accept=".yaml,.yml,.json,application/json,application/yaml,text/yaml"
                        class="text-sm"
                        on:change=move |ev| load_file(ev, text)
                    />
                </label>
            </div>
        </ActionForm>
    }
}

/// Reads the chosen file into the text area (browser only; without
/// JavaScript the file picker is inert and pasting is the way).
#[allow(unused_variables)]
fn load_file(ev: leptos::ev::Event, text: RwSignal<String>) {
    #[cfg(feature = "hydrate")]
    {
        use leptos::wasm_bindgen::JsCast;
        let Some(input) = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
        else {
            return;
        };
        let Some(file) = input.files().and_then(|files| files.get(0)) else {
            return;
        };
        leptos::task::spawn_local(async move {
            if let Ok(content) = wasm_bindgen_futures::JsFuture::from(file.text()).await {
                text.set(content.as_string().unwrap_or_default());
            }
        });
    }
}
