//! The messages pages show instead of data: nothing yet, or an error.

use leptos::prelude::*;

use crate::error::DashboardError;

/// Nothing to show, and what to do about it.
#[component]
pub fn EmptyState(id: &'static str, children: Children) -> impl IntoView {
    view! {
        <div
            id=id
            class="rounded-sm border border-dashed border-slate-300 bg-white px-4 py-8 text-center text-sm text-slate-600"
        >
            {children()}
        </div>
    }
}

/// A load or action that failed, announced to screen readers.
#[component]
pub fn ErrorNotice(error: DashboardError) -> impl IntoView {
    view! {
        <p
            role="alert"
            class="rounded-sm border border-red-200 bg-red-50 px-3 py-2 text-sm text-red-800"
        >
            {error.to_string()}
        </p>
    }
}

/// A missing plan or run: the 404 page's body. On the server it also sets
/// the response status, so links checkers and scripts see a real 404.
#[component]
pub fn NotFound(what: String) -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <section id="not-found" class="mx-auto max-w-lg space-y-3 py-12 text-center">
            <p class="text-sm font-semibold text-slate-500">"404"</p>
            <h1 class="text-2xl font-semibold tracking-tight">"Not found"</h1>
            <p class="text-slate-600">{what}</p>
            <p>
                <a href="/plans" class="text-blue-700 underline hover:text-blue-900">
                    "Back to the plans"
                </a>
            </p>
        </section>
    }
}

/// A validation error next to its form, with the field it names set
/// apart (the plan and schedule forms).
#[component]
pub fn FieldError(error: DashboardError) -> impl IntoView {
    let (field, message) = match error {
        DashboardError::Invalid { message, field } => (field, message),
        other => (None, other.to_string()),
    };
    view! {
        <div role="alert" class="rounded-sm border border-red-300 bg-red-50 px-3 py-2 text-sm text-red-900">
            {field.map(|f| {
                let label = f.clone();
                view! { <p class="font-mono font-semibold" data-field=f>{label}</p> }
            })}
            <p>{message}</p>
        </div>
    }
}
