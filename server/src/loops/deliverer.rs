//! Sends due outbox rows. Any replica may: each keeps up to [`SENDERS`]
//! sends going, taking more due rows as sends end, each locked to it for
//! [`LOCK_FOR`] (SKIP LOCKED on PostgreSQL), so a sender that dies
//! mid-delivery only delays that row until the lock lapses. Sends do not
//! wait for each other: a receiver that takes its whole timeout to answer
//! holds only its own sends (at most four per host, see the store's
//! `IN_FLIGHT_PER_DESTINATION`), while the other receivers' notifications
//! go out.
//! Receivers see the same `X-Baton-Delivery` on every attempt and should
//! de-duplicate on it: a sender that dies after the POST but before
//! recording it sends again (at-least-once delivery of an exactly-once
//! claim).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::loops::Probe;
use crate::secret::Secret;
use crate::store::{DeliveryOutcome, DueDelivery, Store, retry_backoff};
use crate::webhook_signature::{SIGNATURE_HEADER, sign};
use domain::time::Ts;

/// How long a taken delivery stays with its sender.
const LOCK_FOR: Duration = Duration::from_secs(30);
/// One POST may take this long.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Sends one replica keeps going at once.
const SENDERS: usize = 16;
/// The longest one round of the loop takes between two looks for due
/// deliveries (for `/readyz`): a send is never waited for, so a round is
/// one statement; this leaves room for a slow database.
pub const DELIVERY_ROUND_BOUND: Duration = SEND_TIMEOUT;

/// Webhook settings every replica shares.
#[derive(Debug, Clone, Default)]
pub struct DeliveryConfig {
    /// `BATON_WEBHOOK_SECRET`: signs deliveries to `BATON_WEBHOOK_URL` and
    /// to plan webhooks without their own secret.
    pub secret: Option<Secret>,
    /// `BATON_WEBHOOK_MAX_ATTEMPTS`: attempts before a delivery is FAILED.
    pub max_attempts: u32,
}

pub struct Deliverer {
    store: Arc<dyn Store>,
    replica_id: String,
    config: DeliveryConfig,
    poll_interval: Duration,
    /// Built for the first delivery: building a client loads the system's
    /// CA certificates, tens of milliseconds of CPU that a replica which
    /// never sends a webhook should not pay when it starts.
    http: OnceLock<reqwest::Client>,
    probe: Probe,
}

impl Deliverer {
    pub fn new(
        store: Arc<dyn Store>,
        replica_id: String,
        config: DeliveryConfig,
        poll_interval: Duration,
    ) -> Self {
        Deliverer {
            store,
            replica_id,
            config,
            poll_interval,
            http: OnceLock::new(),
            probe: Probe::detached(),
        }
    }

    /// Reports each round to `probe` (for `/readyz`).
    pub fn reporting_to(mut self, probe: Probe) -> Self {
        self.probe = probe;
        self
    }

    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| {
            reqwest::Client::builder()
                .timeout(SEND_TIMEOUT)
                // A signed notification goes to the URL configured, not
                // wherever that answers a redirect to: followed, the
                // payload reached another host and was recorded as
                // delivered to the first. A 3xx is a failed attempt.
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("baton/", env!("CARGO_PKG_VERSION")))
                .build()
                .expect("an HTTP client with default TLS")
        })
    }

    /// Takes up to `room` due deliveries and starts sending each in
    /// `sending`; returns how many it took.
    async fn take_due(
        self: &Arc<Self>,
        room: usize,
        sending: &mut JoinSet<()>,
    ) -> anyhow::Result<usize> {
        // Before the statement: the locks run from the `now` sent with it.
        let asked = Instant::now();
        let due = self
            .store
            .delivery_take_due(&self.replica_id, room as i64, LOCK_FOR, Ts::now())
            .await?;
        // An answer so late that the locks could lapse before the sends end
        // (a stalled connection): another replica may take these any time,
        // so sending them too would only make duplicates. Left alone, they
        // are taken again once their locks lapse.
        if !due.is_empty() && asked.elapsed() + SEND_TIMEOUT >= LOCK_FOR {
            tracing::warn!(deliveries = due.len(), took = %humantime::format_duration(asked.elapsed()),
                "deliveries were handed out too late to send before their locks lapse; leaving them");
            return Ok(0);
        }
        let taken = due.len();
        for d in due {
            let me = self.clone();
            sending.spawn(async move { me.deliver(d).await });
        }
        Ok(taken)
    }

    /// One attempt at `d`, and its outcome kept.
    async fn deliver(&self, d: DueDelivery) {
        let outcome = self.send(&d).await;
        if let Err(e) = self
            .store
            .delivery_record(&self.replica_id, &d, &outcome, Ts::now())
            .await
        {
            tracing::warn!(delivery = %d.delivery_key, error = %e,
                "could not record a delivery attempt; it will be retried when its lock lapses");
        }
    }

    async fn send(&self, d: &DueDelivery) -> DeliveryOutcome {
        let mut request = self
            .http()
            .post(&d.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("X-Baton-Delivery", &d.delivery_key)
            .header("X-Baton-Event", &d.event)
            .body(d.payload.clone());
        if let Some(secret) = d.secret.as_ref().or(self.config.secret.as_ref()) {
            request = request.header(
                SIGNATURE_HEADER,
                sign(secret.expose(), d.payload.as_bytes()),
            );
        }
        let (status_code, error) = match request.send().await {
            Ok(response) if response.status().is_success() => {
                (Some(i64::from(response.status().as_u16())), None)
            }
            Ok(response) => (
                Some(i64::from(response.status().as_u16())),
                Some(format!("receiver answered {}", response.status())),
            ),
            Err(e) => (None, Some(describe(&e))),
        };
        let attempt = d.attempts + 1;
        let retry_at = match &error {
            Some(_) if attempt < i64::from(self.config.max_attempts) => {
                Some(Ts::now().plus(retry_backoff(attempt)))
            }
            _ => None,
        };
        match (&error, retry_at) {
            (None, _) => tracing::info!(delivery = %d.delivery_key, event = %d.event,
                plan_id = d.plan_id, "webhook delivered"),
            (Some(e), Some(_)) => tracing::warn!(delivery = %d.delivery_key, attempt, error = %e,
                "webhook delivery failed; will retry"),
            (Some(e), None) => tracing::error!(delivery = %d.delivery_key, attempt, error = %e,
                "webhook delivery failed for good"),
        }
        DeliveryOutcome {
            status_code,
            error,
            retry_at,
        }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let me = Arc::new(self);
        let signals = me.store.signals().clone();
        let mut sending = JoinSet::new();
        loop {
            let room = SENDERS - sending.len();
            if room == 0 {
                // Alive, every sender busy: the next look comes as one ends.
                me.probe.round_done();
            } else {
                let outcome = me.take_due(room, &mut sending).await;
                me.probe.ended("taking due deliveries", &outcome);
            }
            tokio::select! {
                // A sender is free: look again at once (a retry may be due,
                // or rows a full take or a URL's limit left).
                Some(ended) = sending.join_next(), if !sending.is_empty() => log_panic(ended),
                _ = signals.deliveries.notified() => {}
                _ = tokio::time::sleep(me.poll_interval) => {}
                _ = shutdown.cancelled() => break,
            }
        }
        // Sends under way end within their timeout; their outcomes are
        // kept, so another replica does not send them again for nothing.
        while let Some(ended) = sending.join_next().await {
            log_panic(ended);
        }
    }
}

fn log_panic(ended: Result<(), tokio::task::JoinError>) {
    if let Err(e) = ended {
        tracing::error!(error = %e, "a webhook send panicked; the delivery is retried when its lock lapses");
    }
}

/// A transport error in words an operator can act on, without the
/// destination's password (reqwest names the URL whole).
fn describe(e: &reqwest::Error) -> String {
    let text = match e.url() {
        Some(url) => e
            .to_string()
            .replace(url.as_str(), &crate::store::redact(url.as_str())),
        None => e.to_string(),
    };
    if e.is_timeout() {
        format!(
            "no answer within {}",
            humantime::format_duration(SEND_TIMEOUT)
        )
    } else if e.is_connect() {
        format!("cannot connect: {text}")
    } else {
        text
    }
}
