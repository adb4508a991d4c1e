//! `/login`: the sign-in form. It posts to `/auth/login` as a plain HTML
//! form (no JavaScript needed), which sets the session cookie and returns
//! the browser to the page it came from.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::components::session::signed_in;

#[component]
pub fn LoginPage() -> impl IntoView {
    let query = use_query_map();
    let next = move || query.read().get("next").unwrap_or_else(|| "/".into());
    let failed = move || query.read().get("failed");
    let body = match signed_in() {
        Some(who) if who.open => view! {
            <p id="login-open" class="text-slate-700">
                "No users are configured, so there is nothing to sign in to. "
                <a href="/" class="text-blue-700 underline hover:text-blue-900">"Go to the overview"</a>
            </p>
        }
        .into_any(),
        Some(who) => view! {
            <p id="login-already" class="text-slate-700">
                {format!("You are signed in as {} ({}). ", who.name, who.role.as_str())}
                <a href="/" class="text-blue-700 underline hover:text-blue-900">"Go to the overview"</a>
            </p>
        }
        .into_any(),
        None => view! {
            <form id="login-form" method="post" action="/auth/login" class="space-y-3">
                <input type="hidden" name="next" value=next />
                <div class="flex flex-col gap-1">
                    <label for="login-name" class="text-sm font-medium text-slate-800">"User name"</label>
                    <input
                        id="login-name"
                        name="name"
                        required
                        autofocus
                        autocomplete="username"
                        class="rounded-sm border border-slate-400 bg-white px-2 py-1.5"
                    />
                </div>
                <div class="flex flex-col gap-1">
                    <label for="login-password" class="text-sm font-medium text-slate-800">"Password"</label>
                    <input
                        id="login-password"
                        name="password"
                        type="password"
                        required
                        autocomplete="current-password"
                        class="rounded-sm border border-slate-400 bg-white px-2 py-1.5"
                    />
                </div>
                {move || failed().map(|why| view! {
                    <p role="alert" class="rounded-sm border border-red-200 bg-red-50 px-3 py-2 text-sm text-red-800">
                        {if why == "too-many" {
                            "Too many wrong passwords for this user name: try again in 15 minutes."
                        } else {
                            "Wrong user name or password."
                        }}
                    </p>
                })}
                <button
                    type="submit"
                    class="rounded-sm bg-blue-700 px-4 py-1.5 text-sm font-medium text-white hover:bg-blue-800 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-blue-600"
                >
                    "Sign in"
                </button>
            </form>
        }
        .into_any(),
    };
    view! {
        <Title text="Sign in · Baton" />
        <section class="mx-auto max-w-sm space-y-4 py-8">
            <h1 class="text-2xl font-semibold tracking-tight">"Sign in"</h1>
            {body}
        </section>
    }
}
