//! `GET /live/{view}`: a view's feed as server-sent events.
//!
//! Each event's data is the JSON of the page's server function result
//! (`{"Ok": view}` or `{"Err": error}`). The first event is the current
//! view, so a tab that (re)connects is up to date at once.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use app::components::feed::Feed;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use tokio::time::{Instant, Interval};

use super::hub::{Hub, Subscription};
use crate::auth::Credentials;

/// A comment line this often keeps proxies and browsers from closing an
/// idle feed, and lets the server notice a tab that went away: a closed
/// connection is found only by writing to it, so its place (and its
/// view's refresher) is given back within this. It was 15 s, and a user
/// who opened and closed hundreds of views held their places that long.
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// How long a browser waits before reconnecting a dropped feed (the
/// `retry:` field).
const RECONNECT_AFTER: Duration = Duration::from_secs(2);

/// How often an open feed asks again whether its caller may still read:
/// a sign-out or an expired session ends the feed within this.
const RECHECK: Duration = Duration::from_secs(5);

pub async fn follow(
    State(hub): State<Hub>,
    Path(view): Path<String>,
    Query(params): Query<BTreeMap<String, String>>,
    credentials: Option<Extension<Credentials>>,
    who: Option<Extension<domain::model::Identity>>,
) -> Response {
    let Some(feed) = Feed::parse(&view, &params) else {
        return (
            StatusCode::NOT_FOUND,
            format!("there is no live view `{view}`"),
        )
            .into_response();
    };
    // Counted per user: the guard put who asks in the request (anonymous
    // on a server without users).
    let user = who.map_or_else(|| "anonymous".to_owned(), |Extension(who)| who.name);
    let mut subscription = match hub.subscribe(feed, &user) {
        Ok(subscription) => subscription,
        Err(refusal) => return refusal.into_response(),
    };
    // A view already read goes out at once; otherwise its first read does.
    if subscription.receiver.borrow().is_some() {
        subscription.receiver.mark_changed();
    }
    let stopping = hub.stopping().clone();
    let credentials = credentials.map(|Extension(c)| c);
    let recheck = tokio::time::interval_at(Instant::now() + RECHECK, RECHECK);
    let events = stream::unfold(
        (subscription, true, recheck),
        move |(mut subscription, first, mut recheck): (Subscription, bool, Interval)| {
            let stopping = stopping.clone();
            let credentials = credentials.clone();
            async move {
                let json = loop {
                    tokio::select! {
                        changed = subscription.receiver.changed() => changed.ok()?,
                        _ = stopping.cancelled() => return None,
                        _ = recheck.tick() => {
                            // Ended: the browser reconnects, and is told to sign in.
                            match &credentials {
                                Some(c) if !c.still_hold().await => return None,
                                _ => continue,
                            }
                        }
                    }
                    if let Some(json) = subscription.receiver.borrow_and_update().clone() {
                        break json;
                    }
                };
                let mut event = Event::default().data(&*json);
                if first {
                    event = event.retry(RECONNECT_AFTER);
                }
                Some((Ok::<_, Infallible>(event), (subscription, false, recheck)))
            }
        },
    );
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    // nginx passes this response through unbuffered even where
    // `proxy_buffering` is on (docs/deploy.md).
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
