//! Fair shares of the costly reads (docs/security.md, "Fair shares"): the
//! runs and audit searches and the counts a bulk action shows first, as
//! pages, server functions or API calls. Each person may have a few in
//! flight at once, weighed by what they cost (a search through every error
//! text or plan name weighs more than a look-up by status); past that, the
//! request is answered `429` (after a pause), before it reaches the database. A
//! share is freed when its request ends, however it ends (the client gone
//! included), so one person opening hundreds of searches slows only
//! themselves, never another person's pages or the replica's own loops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use crate::refusal::Audience;

/// Default of `BATON_SEARCH_SHARES_PER_USER`.
pub const DEFAULT_PER_USER: usize = 4;

/// How much of a person's share a request takes; `None` for requests that
/// are not costly reads.
fn weight(method: &Method, path: &str, query: Option<&str>) -> Option<usize> {
    let costly = matches!(
        path,
        "/runs" | "/audit" | "/_fn/runs" | "/_fn/audit" | "/api/v1/runs" | "/api/v1/audit"
    ) || matches!(path, "/api/v1/runs/bulk" | "/api/v1/plans/bulk") && method == Method::GET
        // The plans list costs a count only when it asks for a confirmation.
        || matches!(path, "/plans" | "/_fn/plans")
            && query.is_some_and(|q| q.contains("confirm="));
    if !costly || (method != Method::GET && !path.starts_with("/_fn/")) {
        return None;
    }
    // Text searched inside every row: a scan, not an index look-up.
    let scans = query.is_some_and(|q| {
        q.split('&').any(|pair| {
            matches!(
                pair.split('=').next(),
                Some("error" | "plan" | "subject" | "q")
            ) && pair.split('=').nth(1).is_some_and(|v| !v.is_empty())
        })
    });
    Some(if scans || path.ends_with("/bulk") {
        2
    } else {
        1
    })
}

/// Who holds how much of their share, on this replica.
#[derive(Clone)]
pub struct Shares {
    per_user: usize,
    taken: Arc<Mutex<HashMap<String, usize>>>,
}

/// Part of a person's share, given back when dropped.
struct Taken {
    shares: Shares,
    user: String,
    weight: usize,
}

impl Drop for Taken {
    fn drop(&mut self) {
        let mut taken = self.shares.taken.lock().expect("poisoned");
        if let Some(n) = taken.get_mut(&self.user) {
            *n = n.saturating_sub(self.weight);
            if *n == 0 {
                taken.remove(&self.user);
            }
        }
    }
}

impl Shares {
    pub fn new(per_user: usize) -> Self {
        Shares {
            per_user,
            taken: Arc::default(),
        }
    }

    /// `weight` of `user`'s share, if it is free. A request heavier than a
    /// whole share still runs when the person has nothing else in flight.
    fn take(&self, user: &str, weight: usize) -> Option<Taken> {
        let mut taken = self.taken.lock().expect("poisoned");
        let now = taken.get(user).copied().unwrap_or(0);
        if now > 0 && now + weight > self.per_user {
            return None;
        }
        taken.insert(user.to_owned(), now + weight);
        Some(Taken {
            shares: self.clone(),
            user: user.to_owned(),
            weight,
        })
    }

    /// How much of their share `user` holds now (for tests).
    pub fn held(&self, user: &str) -> usize {
        let taken = self.taken.lock().expect("poisoned");
        taken.get(user).copied().unwrap_or(0)
    }
}

/// The layer: after the sign-in guard, which names the person (an
/// `Identity`; the address stands in for a person where nobody signs in).
pub async fn fair_share(State(shares): State<Shares>, request: Request, next: Next) -> Response {
    let Some(weight) = weight(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    ) else {
        return next.run(request).await;
    };
    let who = request
        .extensions()
        .get::<domain::model::Identity>()
        .map(crate::fair_queue::person)
        .unwrap_or_default();
    let Some(_taken) = shares.take(&who, weight) else {
        return crate::fair_queue::too_many(
            Audience::of(&request),
            format!(
                "too many searches at once from {who}: at most {} of this cost may run together \
                 (BATON_SEARCH_SHARES_PER_USER); try again when one has finished",
                shares.per_user
            ),
        )
        .await;
    };
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use axum::http::{StatusCode, header};

    use super::*;

    #[test]
    fn costly_reads_weigh_by_what_they_scan() {
        let get = Method::GET;
        assert_eq!(weight(&get, "/api/v1/runs", Some("status=FAILED")), Some(1));
        assert_eq!(
            weight(&get, "/api/v1/runs", Some("error=deadlock")),
            Some(2)
        );
        assert_eq!(weight(&get, "/api/v1/runs", Some("error=")), Some(1));
        assert_eq!(weight(&get, "/api/v1/runs/bulk", None), Some(2));
        assert_eq!(weight(&Method::POST, "/api/v1/runs/bulk", None), None);
        assert_eq!(weight(&Method::POST, "/_fn/runs", Some("")), Some(1));
        assert_eq!(weight(&get, "/plans", None), None);
        assert_eq!(weight(&get, "/plans", Some("q=a&confirm=retry")), Some(2));
        assert_eq!(weight(&get, "/api/v1/plans", None), None);
        assert_eq!(weight(&get, "/runs/5", None), None);
    }

    #[test]
    fn a_share_is_bounded_and_given_back() {
        let shares = Shares::new(4);
        let a = shares.take("alice", 2).unwrap();
        let b = shares.take("alice", 2).unwrap();
        assert!(shares.take("alice", 1).is_none(), "alice's share is spent");
        let bob = shares.take("bob", 1).unwrap();
        assert_eq!((shares.held("alice"), shares.held("bob")), (4, 1));
        drop(a);
        let c = shares.take("alice", 1).unwrap();
        drop((b, c, bob));
        assert_eq!((shares.held("alice"), shares.held("bob")), (0, 0));
        // Heavier than a whole share: runs alone.
        let big = Shares::new(1);
        let one = big.take("carol", 2).unwrap();
        assert!(big.take("carol", 1).is_none());
        drop(one);
    }

    /// The layer over a search that waits for `gate`, with the person the
    /// guard would have named from an `x-who` header.
    fn app(shares: Shares, gate: Arc<tokio::sync::Semaphore>) -> axum::Router {
        let search = move || {
            let gate = gate.clone();
            async move {
                let _open = gate.acquire().await;
                "found"
            }
        };
        axum::Router::new()
            .route("/api/v1/runs", axum::routing::get(search))
            .layer(axum::middleware::from_fn_with_state(shares, fair_share))
            .layer(axum::middleware::from_fn(
                |mut request: Request, next: Next| async move {
                    let name = request.headers()["x-who"].to_str().unwrap().to_owned();
                    request.extensions_mut().insert(domain::model::Identity {
                        name,
                        role: domain::model::Role::Viewer,
                        open: false,
                        address: None,
                        forwarded_for: None,
                    });
                    next.run(request).await
                },
            ))
    }

    fn search(who: &str, query: &str) -> Request {
        Request::builder()
            .uri(format!("/api/v1/runs?{query}"))
            .header("x-who", who)
            .body(axum::body::Body::empty())
            .unwrap()
    }

    /// Waits until `user` holds `n` of their share.
    async fn held(shares: &Shares, user: &str, n: usize) {
        while shares.held(user) < n {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn one_persons_searches_hold_back_only_that_person_until_they_end() {
        use tower_service::Service;
        let shares = Shares::new(2);
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let mut app = app(shares.clone(), gate.clone());
        // Alice's two searches by status hold her whole share…
        let first = tokio::spawn(app.call(search("alice", "status=FAILED")));
        let second = tokio::spawn(app.call(search("alice", "status=DONE")));
        held(&shares, "alice", 2).await;
        // …so a third is refused, after the pause, saying why; Bob is not
        // held back.
        let asked = std::time::Instant::now();
        let refused = app.call(search("alice", "status=RUNNING")).await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(asked.elapsed() >= crate::fair_queue::REFUSAL_PAUSE);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(refused.into_body(), 4096)
            .await
            .unwrap();
        assert!(String::from_utf8_lossy(&body).contains("too many searches at once from alice"));
        let bob = tokio::spawn(app.call(search("bob", "error=deadlock")));
        held(&shares, "bob", 2).await;
        gate.add_permits(3);
        for done in [first, second, bob] {
            assert_eq!(done.await.unwrap().unwrap().status(), StatusCode::OK);
        }
        assert_eq!((shares.held("alice"), shares.held("bob")), (0, 0));
        gate.acquire_many(3).await.unwrap().forget();

        // A request whose client went away gives its share back too.
        let gone = tokio::spawn(app.call(search("alice", "error=x")));
        held(&shares, "alice", 2).await;
        gone.abort();
        let _ = gone.await;
        assert_eq!(shares.held("alice"), 0);
    }
}
