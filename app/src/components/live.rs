//! Live refresh without a reload: the page follows its view's push feed
//! (server-sent events from `/live/…`, one refresher per view on each
//! replica, however many tabs watch), and each message refetches the
//! page's resource from the pushed value instead of the database.
//!
//! Server-sent events rather than a WebSocket: the feed only flows from
//! server to browser, `EventSource` reconnects by itself, SSE is plain HTTP
//! through the same authentication guard and proxies as the pages, and the
//! server needs no upgrade handling.
//!
//! Everything here that touches the browser runs in an effect, so it never
//! runs on the server nor without the wasm bundle: then the page is a plain
//! server-rendered document, refreshed by reloading.

use std::future::Future;
use std::time::Duration;

use leptos::prelude::*;
use serde::de::DeserializeOwned;

use crate::components::feed::Feed;
use crate::error::DashboardError;

/// How often a page polls its server function when its feed cannot be
/// reached (and how often pages without a feed refetch).
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// A page's live data source: put [`Live::track`] in a resource's source
/// and wrap its fetch in [`Live::or_fetch`].
#[derive(Clone, Copy)]
pub struct Live {
    /// The feed being followed, by its path.
    path: Memo<String>,
    /// Moves on each pushed view (and each fallback poll).
    version: RwSignal<u64>,
    /// The latest pushed view not yet taken: its feed's path and its JSON.
    pushed: StoredValue<Option<(String, String)>>,
}

/// Follows `feed` (re-read when the page's parameters change) while the
/// tab is visible: opens an `EventSource` for it, closes it when the tab
/// is hidden or the page goes away, and opens a new one when the tab shows
/// again (whose first message is the current view). If the feed fails
/// repeatedly (refused, or a proxy in the way), polls the page's server
/// function every [`REFRESH_EVERY`] instead, so the page stays live.
pub fn use_live(feed: impl Fn() -> Feed + Send + Sync + 'static) -> Live {
    let live = Live {
        path: Memo::new(move |_| feed().path()),
        version: RwSignal::new(0),
        pushed: StoredValue::new(None),
    };
    #[cfg(feature = "hydrate")]
    browser::follow(live);
    live
}

impl Live {
    /// Read in a resource's source, so every push refetches it.
    pub fn track(&self) -> u64 {
        self.version.get()
    }

    /// The view the feed pushed last, if it is this page's and not yet
    /// shown; otherwise `fetch` (the page's server function: on the
    /// server, on the first render, after an action, or while polling).
    pub fn or_fetch<T, F>(self, fetch: F) -> impl Future<Output = Result<T, DashboardError>>
    where
        T: DeserializeOwned,
        F: Future<Output = Result<T, DashboardError>>,
    {
        let wanted = self.path.get_untracked();
        let pushed = self
            .pushed
            .try_update_value(Option::take)
            .flatten()
            .filter(|(path, _)| *path == wanted)
            .and_then(|(_, json)| serde_json::from_str::<Result<T, DashboardError>>(&json).ok());
        async move {
            match pushed {
                Some(view) => view,
                None => fetch.await,
            }
        }
    }
}

#[cfg(feature = "hydrate")]
mod browser {
    use std::cell::RefCell;
    use std::rc::{Rc, Weak};
    use std::time::Duration;

    use leptos::prelude::*;
    use send_wrapper::SendWrapper;
    use wasm_bindgen::JsCast;
    use wasm_bindgen::closure::Closure;
    use web_sys::{Event, EventSource, MessageEvent};

    use super::{Live, REFRESH_EVERY};

    /// Errors in a row, without a message between them, after which the
    /// page stops waiting for its feed and polls instead.
    const FEED_FAILURES_BEFORE_POLLING: u32 = 3;

    pub fn follow(live: Live) {
        Effect::new(move |_| {
            let path = live.path.get();
            let follower = Follower::start(live, path);
            let follower = SendWrapper::new(follower);
            on_cleanup(move || follower.take().stop());
        });
    }

    /// One page's connection to one feed, and the visibility listener
    /// that opens and closes it.
    struct Follower {
        state: Rc<RefCell<State>>,
        on_visibility: Closure<dyn FnMut(Event)>,
    }

    struct State {
        live: Live,
        path: String,
        source: Option<Open>,
        /// Errors since the last message.
        failures: u32,
        polling: Option<IntervalHandle>,
        /// The page went away: nothing opens again.
        stopped: bool,
    }

    /// An open `EventSource` with the callbacks it calls.
    struct Open {
        source: EventSource,
        _on_message: Closure<dyn FnMut(MessageEvent)>,
        _on_error: Closure<dyn FnMut(Event)>,
    }

    impl Follower {
        fn start(live: Live, path: String) -> Follower {
            let state = Rc::new(RefCell::new(State {
                live,
                path,
                source: None,
                failures: 0,
                polling: None,
                stopped: false,
            }));
            let weak = Rc::downgrade(&state);
            let on_visibility = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
                if let Some(state) = weak.upgrade() {
                    if document().hidden() {
                        close(&state);
                    } else {
                        open(&state);
                    }
                }
            });
            let _ = document().add_event_listener_with_callback(
                "visibilitychange",
                on_visibility.as_ref().unchecked_ref(),
            );
            if !document().hidden() {
                open(&state);
            }
            Follower {
                state,
                on_visibility,
            }
        }

        fn stop(self) {
            let _ = document().remove_event_listener_with_callback(
                "visibilitychange",
                self.on_visibility.as_ref().unchecked_ref(),
            );
            close(&self.state);
            self.state.borrow_mut().stopped = true;
        }
    }

    /// Opens the feed (again): a fresh start, so a page that fell back to
    /// polling tries the feed once more each time the tab shows.
    fn open(state: &Rc<RefCell<State>>) {
        close(state);
        if state.borrow().stopped {
            return;
        }
        let path = state.borrow().path.clone();
        let Ok(source) = EventSource::new(&path) else {
            poll(state);
            return;
        };
        let weak = Rc::downgrade(state);
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
            let (Some(state), Some(json)) = (weak.upgrade(), event.data().as_string()) else {
                return;
            };
            let (live, path) = {
                let mut s = state.borrow_mut();
                s.failures = 0;
                (s.live, s.path.clone())
            };
            live.pushed.set_value(Some((path, json)));
            live.version.update(|v| *v += 1);
        });
        let weak: Weak<RefCell<State>> = Rc::downgrade(state);
        let on_error = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
            let Some(state) = weak.upgrade() else {
                return;
            };
            // The browser retries by itself unless the answer was not a
            // feed at all (a refusal): then the source is closed for good.
            let give_up = {
                let mut s = state.borrow_mut();
                s.failures += 1;
                let closed = s
                    .source
                    .as_ref()
                    .is_some_and(|o| o.source.ready_state() == EventSource::CLOSED);
                closed || s.failures >= FEED_FAILURES_BEFORE_POLLING
            };
            if give_up {
                // Not from inside this callback: closing the source drops
                // the closure that is running.
                set_timeout(move || poll(&state), Duration::ZERO);
            }
        });
        source.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        let mut s = state.borrow_mut();
        s.failures = 0;
        s.source = Some(Open {
            source,
            _on_message: on_message,
            _on_error: on_error,
        });
    }

    /// Closes the feed and stops polling.
    fn close(state: &Rc<RefCell<State>>) {
        let mut s = state.borrow_mut();
        if let Some(open) = s.source.take() {
            open.source.set_onmessage(None);
            open.source.set_onerror(None);
            open.source.close();
        }
        if let Some(handle) = s.polling.take() {
            handle.clear();
        }
    }

    /// Falls back to polling the server function: each tick moves the
    /// version with nothing pushed, so the resource fetches.
    fn poll(state: &Rc<RefCell<State>>) {
        close(state);
        if state.borrow().stopped {
            return;
        }
        let live = state.borrow().live;
        live.version.update(|v| *v += 1);
        let handle = set_interval_with_handle(
            move || {
                if !document().hidden() {
                    live.version.update(|v| *v += 1);
                }
            },
            REFRESH_EVERY,
        )
        .ok();
        state.borrow_mut().polling = handle;
    }
}
