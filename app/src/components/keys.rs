//! Keyboard shortcuts, once the page is hydrated: `/` goes to the search
//! box, as in most consoles — the page's own (`data-search`), or the Runs
//! page's when the page has none. Never while typing in a field.

#[cfg(feature = "hydrate")]
pub fn slash_focuses_search() {
    use leptos::prelude::*;
    use wasm_bindgen::JsCast;

    let handle = window_event_listener(leptos::ev::keydown, |e| {
        if e.key() != "/" || e.ctrl_key() || e.meta_key() || e.alt_key() {
            return;
        }
        let document = document();
        let typing = document.active_element().is_some_and(|el| {
            matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT")
                || el
                    .dyn_ref::<web_sys::HtmlElement>()
                    .is_some_and(|el| el.is_content_editable())
        });
        if typing {
            return;
        }
        e.prevent_default();
        match document
            .query_selector("[data-search]")
            .ok()
            .flatten()
            .and_then(|el| el.dyn_into::<web_sys::HtmlElement>().ok())
        {
            Some(search) => {
                let _ = search.focus();
            }
            None => {
                let _ = window().location().assign("/runs?focus=search");
            }
        }
    });
    on_cleanup(move || handle.remove());
}

/// On the server there is nothing to listen to.
#[cfg(not(feature = "hydrate"))]
pub fn slash_focuses_search() {}
