//! Fair turns at the replica (docs/security.md, "Fair shares"): every
//! request that names a person, except the live feeds (bounded on their
//! own), takes one of `BATON_REQUEST_SLOTS` slots while a handler works on
//! it. When all are taken, requests wait, and a slot that frees goes to
//! the waiting person who holds the fewest, so a person asking one thing
//! at a time is served next however many requests another has waiting.
//! A signed-in person may hold at most half the slots, so requests slow on
//! purpose (a body sent a byte at a time) cannot take them all, and may
//! have at most `BATON_REQUESTS_PER_USER` in flight: past that, `429` at
//! once, before any work. Public paths (`/readyz`, `/healthz`, sign-in,
//! the bundle) take no slot, so a flood cannot make a replica look
//! unready.
//!
//! Without users every client is the same loopback person, with nobody
//! to be fair to: requests take no slot.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::oneshot;

use crate::refusal::Audience;

/// Default of `BATON_REQUEST_SLOTS`: a little under the smaller database
/// pool (8 connections on SQLite), so requests that hold a slot do not
/// then queue for a connection, and the replica's own loops find one.
pub const DEFAULT_SLOTS: usize = 6;

/// Default of `BATON_REQUESTS_PER_USER`: several tabs' worth of page
/// loads at once, far under what a script looping on the API sends.
pub const DEFAULT_PER_USER: usize = 16;

/// The paths of requests that take no slot: long-lived feeds, which hold
/// their connection for as long as a tab is open.
const UNQUEUED_PREFIX: &str = "/live/";

#[derive(Clone)]
pub struct FairQueue {
    inner: Arc<Inner>,
}

struct Inner {
    per_user: usize,
    state: Mutex<Turns>,
    /// Requests answered 429 for want of a turn since the replica started.
    refused: AtomicU64,
}

/// The queue as `/metrics` shows it.
pub struct QueueStats {
    pub held: usize,
    pub waiting: usize,
    pub refused: u64,
}

#[derive(Default)]
struct Turns {
    /// Slots nobody holds; above zero while someone waits only when every
    /// waiting person already holds as many as they may.
    free: usize,
    /// Slots held, by person.
    serving: HashMap<String, usize>,
    /// Requests waiting for a slot, by person, oldest first.
    waiting: HashMap<String, VecDeque<oneshot::Sender<()>>>,
    /// The most slots one person may hold: half of them.
    per_person: usize,
}

impl Turns {
    fn waiting_of(&mut self, who: &str) -> usize {
        match self.waiting.get_mut(who) {
            Some(queue) => {
                // Requests whose client went away wait no more.
                queue.retain(|turn| !turn.is_closed());
                queue.len()
            }
            None => 0,
        }
    }

    /// Gives a freed slot to the waiting person who holds the fewest (of
    /// equals, any: the one served then holds one more, so the next slot
    /// goes to another), or leaves it free.
    fn hand_on(&mut self) {
        loop {
            let held = |who: &String| self.serving.get(who).copied().unwrap_or(0);
            let next = self
                .waiting
                .iter()
                .filter(|(who, queue)| !queue.is_empty() && held(who) < self.per_person)
                .min_by_key(|(who, _)| held(who))
                .map(|(who, _)| who.clone());
            let Some(who) = next else {
                self.free += 1;
                return;
            };
            let queue = self.waiting.get_mut(&who).expect("just found");
            let turn = queue.pop_front().expect("not empty");
            if queue.is_empty() {
                self.waiting.remove(&who);
            }
            if turn.send(()).is_ok() {
                *self.serving.entry(who).or_default() += 1;
                return;
            }
            // That client went away; the slot goes to the next.
        }
    }

    fn release(&mut self, who: &str) {
        if let Some(n) = self.serving.get_mut(who) {
            *n -= 1;
            if *n == 0 {
                self.serving.remove(who);
            }
        }
        self.hand_on();
    }
}

/// A held slot, given back when dropped.
struct Slot {
    queue: FairQueue,
    who: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.queue.inner.turns().release(&self.who);
    }
}

/// A request waiting for its turn. Dropped before the turn came (the
/// client went away), it leaves the queue; dropped after the turn was
/// given but before it was taken up, it hands the slot on.
struct Waiting {
    queue: FairQueue,
    who: String,
    turn: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut turn) = self.turn.take() {
            turn.close();
            if turn.try_recv().is_ok() {
                self.queue.inner.turns().release(&self.who);
            }
        }
    }
}

/// Why a request was not let in.
#[derive(Debug, PartialEq)]
pub struct TooMany {
    pub in_flight: usize,
}

impl Inner {
    fn turns(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.state.lock().expect("poisoned")
    }
}

impl FairQueue {
    pub fn new(slots: usize, per_user: usize) -> Self {
        FairQueue {
            inner: Arc::new(Inner {
                per_user,
                state: Mutex::new(Turns {
                    free: slots,
                    per_person: slots.div_ceil(2),
                    ..Turns::default()
                }),
                refused: AtomicU64::new(0),
            }),
        }
    }

    /// Waits for `who`'s turn: refused at once with `per_user` requests
    /// in flight already, and never given more than half the slots.
    async fn enter(&self, who: &str) -> Result<Slot, TooMany> {
        let receiver = {
            let mut turns = self.inner.turns();
            let serving = turns.serving.get(who).copied().unwrap_or(0);
            let in_flight = serving + turns.waiting_of(who);
            if in_flight >= self.inner.per_user {
                return Err(TooMany { in_flight });
            }
            if turns.free > 0 && serving < turns.per_person {
                turns.free -= 1;
                *turns.serving.entry(who.to_owned()).or_default() += 1;
                None
            } else {
                let (sender, receiver) = oneshot::channel();
                turns
                    .waiting
                    .entry(who.to_owned())
                    .or_default()
                    .push_back(sender);
                Some(receiver)
            }
        };
        if let Some(receiver) = receiver {
            let mut waiting = Waiting {
                queue: self.clone(),
                who: who.to_owned(),
                turn: Some(receiver),
            };
            let turn = waiting.turn.as_mut().expect("set above");
            // The sender is dropped only by a hand-on that found this
            // client gone, and this client is here.
            let _ = turn.await;
            waiting.turn = None;
        }
        Ok(Slot {
            queue: self.clone(),
            who: who.to_owned(),
        })
    }

    /// Slots held and requests waiting in all, and refusals so far.
    pub fn stats(&self) -> QueueStats {
        let mut turns = self.inner.turns();
        let held = turns.serving.values().sum();
        let people: Vec<String> = turns.waiting.keys().cloned().collect();
        let waiting = people.iter().map(|who| turns.waiting_of(who)).sum();
        QueueStats {
            held,
            waiting,
            refused: self.inner.refused.load(Ordering::Relaxed),
        }
    }

    /// Slots held and requests waiting, of `who` (for tests and logs).
    pub fn load_of(&self, who: &str) -> (usize, usize) {
        let mut turns = self.inner.turns();
        let serving = turns.serving.get(who).copied().unwrap_or(0);
        (serving, turns.waiting_of(who))
    }
}

/// The layer: inside the sign-in guard, which names the person.
pub async fn fair_queue(State(queue): State<FairQueue>, request: Request, next: Next) -> Response {
    if request.uri().path().starts_with(UNQUEUED_PREFIX) {
        return next.run(request).await;
    }
    // Public paths carry no person: they take no slot.
    let Some(who) = request.extensions().get::<domain::model::Identity>() else {
        return next.run(request).await;
    };
    // Without users every client is the one loopback person: there is
    // nobody to be fair between.
    if who.open {
        return next.run(request).await;
    }
    let person = person(who);
    match queue.enter(&person).await {
        Ok(_slot) => next.run(request).await,
        Err(TooMany { in_flight }) => {
            queue.inner.refused.fetch_add(1, Ordering::Relaxed);
            too_many(
                Audience::of(&request),
                format!(
                    "too many requests at once from {person}: {in_flight} are in flight on this \
                     replica, and at most {} may be (BATON_REQUESTS_PER_USER); try again when one \
                     has been answered",
                    queue.inner.per_user
                ),
            )
            .await
        }
    }
}

/// Who a request counts against: the signed-in user, or without users
/// the client's address.
pub fn person(who: &domain::model::Identity) -> String {
    match (who.open, &who.address) {
        (true, Some(address)) => format!("address {address}"),
        _ => who.name.clone(),
    }
}

/// How long a refusal for want of a turn or a share is held before it is
/// sent. A flood answered `429` at once comes straight back: in `baton
/// bench --fairness` 64 connections were refused 14,000 times a second,
/// and that work, more than the requests served, slowed everyone else.
/// Held, each connection is refused about once a second, at the cost of
/// a timer.
pub const REFUSAL_PAUSE: Duration = Duration::from_secs(1);

/// `429` with `Retry-After: 1` and `error`, written for `audience`,
/// after [`REFUSAL_PAUSE`].
pub async fn too_many(audience: Audience, error: String) -> Response {
    tokio::time::sleep(REFUSAL_PAUSE).await;
    let mut refused = audience.refuse(StatusCode::TOO_MANY_REQUESTS, error);
    refused
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    refused
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `entering` is still waiting after the queue had a moment.
    async fn still_waiting<F: std::future::Future>(entering: &mut std::pin::Pin<Box<F>>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), entering.as_mut())
            .await
            .is_err()
    }

    /// Many clients on many threads, some leaving while they wait, some
    /// while their turn is being handed to them: nobody waits while a slot
    /// they may take is free, and every slot comes back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn clients_coming_and_going_lose_no_slot_and_strand_nobody() {
        const SLOTS: usize = 5;
        let queue = FairQueue::new(SLOTS, 8);
        let people = ["alice", "bob", "carol", "dave"];
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut clients = Vec::new();
        for client in 0..64u64 {
            let queue = queue.clone();
            let stop = stop.clone();
            clients.push(tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(client);
                let who = people[rng.usize(..people.len())];
                let (mut served, mut left) = (0u32, 0u32);
                while !stop.load(Ordering::Relaxed) {
                    // A client gives up after 0 to 3 ms; a turn held is
                    // held for 0 to 200 µs, yielding or sleeping.
                    let patience = Duration::from_micros(rng.u64(0..3_000));
                    match tokio::time::timeout(patience, queue.enter(who)).await {
                        Ok(Ok(slot)) => {
                            served += 1;
                            if rng.bool() {
                                tokio::task::yield_now().await;
                            } else {
                                tokio::time::sleep(Duration::from_micros(rng.u64(0..200))).await;
                            }
                            drop(slot);
                        }
                        Ok(Err(TooMany { .. })) => tokio::task::yield_now().await,
                        Err(_) => left += 1,
                    }
                }
                (served, left)
            }));
        }
        // Meanwhile: a slot is never free while someone who may take it
        // waits (checked under the queue's lock, so it is one state).
        let mut checks = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            {
                let mut turns = queue.inner.turns();
                let people: Vec<String> = turns.waiting.keys().cloned().collect();
                for who in people {
                    let held = turns.serving.get(&who).copied().unwrap_or(0);
                    if turns.waiting_of(&who) > 0 && held < turns.per_person {
                        assert_eq!(turns.free, 0, "{who} holds {held} and waits by a free slot");
                    }
                }
                let held: usize = turns.serving.values().sum();
                assert_eq!(held + turns.free, SLOTS, "slots held and free add up");
                checks += 1;
            }
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
        stop.store(true, Ordering::Relaxed);
        let (mut served, mut left) = (0, 0);
        for client in clients {
            let (s, l) = tokio::time::timeout(Duration::from_secs(10), client)
                .await
                .expect("every client gets an answer")
                .unwrap();
            served += s;
            left += l;
        }
        assert!(
            served > 1_000 && left > 100,
            "{served} served, {left} left, {checks} checks"
        );
        let turns = queue.inner.turns();
        assert_eq!(turns.free, SLOTS, "every slot came back");
        assert!(turns.serving.is_empty());
        assert!(
            turns
                .waiting
                .values()
                .all(|queue| queue.iter().all(|t| t.is_closed()))
        );
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_person_holding_fewest() {
        let queue = FairQueue::new(4, 100);
        // Alice takes her half of the slots, and queues ten more.
        let mut alices = Vec::new();
        for _ in 0..2 {
            alices.push(queue.enter("alice").await.unwrap());
        }
        let mut alice_waits: Vec<_> = (0..10).map(|_| Box::pin(queue.enter("alice"))).collect();
        for wait in &mut alice_waits {
            assert!(still_waiting(wait).await, "alice holds her half already");
        }
        // Carol takes the other two slots; bob must now wait.
        let carol = [
            queue.enter("carol").await.unwrap(),
            queue.enter("carol").await.unwrap(),
        ];
        let mut bob = Box::pin(queue.enter("bob"));
        assert!(still_waiting(&mut bob).await);
        assert_eq!(queue.load_of("alice"), (2, 10));
        // One of alice's slots frees: it goes to bob, who holds none, not
        // to alice's ten waiting requests, which were there first.
        drop(alices.pop());
        let bobs = tokio::time::timeout(Duration::from_secs(1), bob)
            .await
            .expect("bob's turn came")
            .unwrap();
        assert_eq!(queue.load_of("bob"), (1, 0));
        assert_eq!(queue.load_of("alice"), (1, 10));
        // Then alice's, one by one as slots free.
        drop(carol);
        drop(bobs);
        assert_eq!(queue.load_of("alice"), (2, 9), "at most half the slots");
        drop(alices);
        drop(alice_waits);
        assert_eq!(queue.load_of("alice"), (0, 0), "every slot given back");
        assert_eq!(queue.inner.turns().free, 4);
    }

    #[tokio::test]
    async fn past_the_bound_a_person_is_refused_at_once_and_others_are_not() {
        let queue = FairQueue::new(2, 3);
        let held = queue.enter("alice").await.unwrap();
        let mut waits: Vec<_> = (0..2).map(|_| Box::pin(queue.enter("alice"))).collect();
        for wait in &mut waits {
            assert!(still_waiting(wait).await);
        }
        assert_eq!(
            queue.enter("alice").await.err(),
            Some(TooMany { in_flight: 3 })
        );
        let stats = queue.stats();
        assert_eq!((stats.held, stats.waiting), (1, 2));
        let bob = queue.enter("bob").await.expect("bob is not alice");
        drop((held, bob, waits));
        assert_eq!(queue.inner.turns().free, 2);
    }

    #[tokio::test]
    async fn a_request_whose_client_left_gives_its_place_and_its_turn_back() {
        let queue = FairQueue::new(1, 10);
        let held = queue.enter("alice").await.unwrap();
        // Bob's first request gives up while waiting (its client left).
        let mut gone = Box::pin(queue.enter("bob"));
        assert!(still_waiting(&mut gone).await);
        drop(gone);
        assert_eq!(queue.load_of("bob"), (0, 0), "no longer counted");
        let mut bob = Box::pin(queue.enter("bob"));
        assert!(still_waiting(&mut bob).await);
        drop(held);
        let bobs = tokio::time::timeout(Duration::from_secs(1), bob)
            .await
            .expect("the slot went to the request still there")
            .unwrap();
        drop(bobs);
        assert_eq!(queue.inner.turns().free, 1);
    }
}
