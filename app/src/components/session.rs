//! Who is signed in, as every page sees it: the header's name and sign-out
//! button, the warning of a server without users, and whether actions are
//! offered at all.
//!
//! The server decides who is asking (its authentication guard) and writes
//! it into the page's `<body data-who>`; the browser reads it back when it
//! hydrates, so both render the same header without another request.

use leptos::prelude::*;

use domain::model::Identity;

/// The attribute of `<body>` that carries the [`Identity`] as JSON (the
/// shell writes it literally: `view!` takes no constant attribute names).
pub const WHO_ATTRIBUTE: &str = "data-who";

/// The signed-in user, provided as context by [`crate::App`].
#[derive(Clone, Debug, PartialEq)]
pub struct SignedIn(pub Option<Identity>);

/// Who the current request is from: on the server, what the guard
/// established; in the browser, what the server wrote into the page.
pub fn who_is_asking() -> Option<Identity> {
    #[cfg(feature = "ssr")]
    {
        crate::backend::identity().ok()
    }
    #[cfg(all(feature = "hydrate", not(feature = "ssr")))]
    {
        let text = document().body()?.get_attribute(WHO_ATTRIBUTE)?;
        serde_json::from_str(&text).ok()
    }
    #[cfg(not(any(feature = "ssr", feature = "hydrate")))]
    {
        None
    }
}

/// The identity as the `data-who` attribute's value ("" when nobody).
pub fn who_attribute() -> String {
    who_is_asking()
        .and_then(|who| serde_json::to_string(&who).ok())
        .unwrap_or_default()
}

pub fn signed_in() -> Option<Identity> {
    use_context::<SignedIn>().and_then(|SignedIn(who)| who)
}

/// Whether the page should offer changes (submit, actions). The server
/// checks again: this only spares viewers buttons that would be refused.
pub fn may_act() -> bool {
    signed_in().is_some_and(|who| who.role.may_act())
}

/// The header's right end: who is signed in, and the way out.
#[component]
pub fn SessionBar() -> impl IntoView {
    signed_in().filter(|who| !who.open).map(|who| {
        view! {
            <div id="session" class="ml-auto flex items-center gap-3 text-sm">
                <span class="text-slate-700">
                    <span data-user=who.name.clone() class="font-medium text-slate-900">{who.name.clone()}</span>
                    " · "
                    {who.role.as_str()}
                </span>
                <form method="post" action="/auth/logout">
                    <button type="submit" class="btn btn-plain">"Sign out"</button>
                </form>
            </div>
        }
    })
}

/// On every page of a server without users: anyone who reaches it may do
/// anything, which is why it listens on loopback only.
#[component]
pub fn OpenServerBanner() -> impl IntoView {
    signed_in().filter(|who| who.open).map(|_| {
        view! {
            <div id="open-server" role="note" class="border-b border-amber-300 bg-amber-50">
                <p class="mx-auto max-w-7xl px-4 py-2 text-sm text-amber-950">
                    <strong>"No users are configured."</strong>
                    " Anyone who can reach this address acts as an operator, so Baton listens on loopback only. Set BATON_USERS_FILE to require sign-in and to listen elsewhere."
                </p>
            </div>
        }
    })
}
