//! The promotion gates (docs/design.md, "Gates"), evaluated in memory for
//! one round.
//!
//! Dependencies (gate 6) are not judged here: a run whose task waits for
//! another task is `held` and the round does not read it at all
//! (the store's `engine::gates::dependencies` releases it when its last
//! dependency completes). Every other gate is.
//!
//! A backend loads every PENDING run that is not held and every run that
//! holds a slot (AVAILABLE or RUNNING) inside one serialised transaction,
//! asks [`evaluate`] (here, without a database) which runs to promote and which waiting causes
//! changed, and writes both back. Runs promoted earlier in the same round
//! count against the target locks and plan limits they take (in-memory
//! round tracking), so one round can never over-promote.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use crate::time::Ts;
use crate::version;

/// A PENDING run as the promoter sees it.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct PendingRun {
    pub id: i64,
    pub task_id: i64,
    pub plan_id: i64,
    pub target: String,
    pub exclusive: bool,
    pub version: Option<String>,
    pub node: Option<String>,
    pub run_at: Option<Ts>,
    pub waiting_cause: Option<String>,
    pub parallel_limit: Option<i64>,
    pub created_at: Ts,
    /// Pinned runs only: how long to wait for the node before running
    /// anywhere; `None` = never.
    pub reassign_after_ms: Option<i64>,
    /// Some task of the plan waits for this run's task.
    pub dependents: bool,
    /// A dependency holds it: read only for its version, which larger
    /// versions on its target wait for; never promoted or given a cause
    /// by a round.
    pub held: bool,
    pub approval_pending: bool,
    /// 1 for a task's first run; above 1, a retry, whose `run_at` is the
    /// end of its backoff.
    pub attempt: i64,
    /// The brakes on its plan and target, filled in from [`Brakes`]
    /// rather than read per run: few plans and targets have any, and a
    /// round reads every PENDING run.
    #[cfg_attr(feature = "sqlx", sqlx(skip))]
    pub plan_paused_by: Option<String>,
    #[cfg_attr(feature = "sqlx", sqlx(skip))]
    pub plan_paused_at: Option<Ts>,
    #[cfg_attr(feature = "sqlx", sqlx(skip))]
    pub target_paused_by: Option<String>,
    #[cfg_attr(feature = "sqlx", sqlx(skip))]
    pub target_paused_at: Option<Ts>,
    #[cfg_attr(feature = "sqlx", sqlx(skip))]
    pub target_capacity: Option<i64>,
}

/// A paused plan.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct PlanBrake {
    pub id: i64,
    pub paused_by: String,
    pub paused_at: Ts,
}

/// A target with operator settings.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct TargetBrake {
    pub target: String,
    pub capacity: Option<i64>,
    pub paused_by: Option<String>,
    pub paused_at: Option<Ts>,
}

/// Every pause and capacity in force, read once per round.
#[derive(Debug, Clone, Default)]
pub struct Brakes {
    pub plans: Vec<PlanBrake>,
    pub targets: Vec<TargetBrake>,
}

/// A row of [`ROUND_CONTEXT`], by `kind`: a paused plan (`plan`), a
/// target's settings (`target`) or the runs holding a target (`hold`).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct ContextRow {
    pub kind: String,
    pub plan_id: Option<i64>,
    pub target: Option<String>,
    pub capacity: Option<i64>,
    pub paused_by: Option<String>,
    pub paused_at: Option<Ts>,
    pub exclusive: Option<bool>,
    pub holder: Option<i64>,
    pub last: Option<i64>,
    pub n: Option<i64>,
}

impl Brakes {
    /// Sorts [`ROUND_CONTEXT`]'s rows into the brakes and the target
    /// holders.
    pub fn from_context(rows: Vec<ContextRow>) -> Result<(Self, Vec<TargetHold>), String> {
        let mut brakes = Brakes::default();
        let mut holds = Vec::new();
        for row in rows {
            match (row.kind.as_str(), row.plan_id, row.target) {
                ("plan", Some(id), _) => {
                    let (Some(paused_by), Some(paused_at)) = (row.paused_by, row.paused_at) else {
                        return Err(format!("plan {id} is paused by nobody or at no time"));
                    };
                    brakes.plans.push(PlanBrake {
                        id,
                        paused_by,
                        paused_at,
                    });
                }
                ("target", _, Some(target)) => brakes.targets.push(TargetBrake {
                    target,
                    capacity: row.capacity,
                    paused_by: row.paused_by,
                    paused_at: row.paused_at,
                }),
                ("hold", _, Some(target)) => {
                    let (Some(exclusive), Some(holder), Some(last), Some(n)) =
                        (row.exclusive, row.holder, row.last, row.n)
                    else {
                        return Err(format!(
                            "the holders of {target} were read without their runs"
                        ));
                    };
                    holds.push(TargetHold {
                        target,
                        exclusive,
                        holder,
                        last,
                        n,
                    });
                }
                (kind, ..) => {
                    return Err(format!("a round read a {kind:?} row without what it names"));
                }
            }
        }
        Ok((brakes, holds))
    }

    /// Copies the brakes onto the runs they apply to.
    pub fn apply(&self, pending: &mut [PendingRun]) {
        if self.plans.is_empty() && self.targets.is_empty() {
            return;
        }
        let plans: HashMap<i64, &PlanBrake> = self.plans.iter().map(|p| (p.id, p)).collect();
        let targets: HashMap<&str, &TargetBrake> = self
            .targets
            .iter()
            .map(|t| (t.target.as_str(), t))
            .collect();
        for run in pending {
            if let Some(p) = plans.get(&run.plan_id) {
                run.plan_paused_by = Some(p.paused_by.clone());
                run.plan_paused_at = Some(p.paused_at);
            }
            if let Some(t) = targets.get(run.target.as_str()) {
                run.target_paused_by = t.paused_by.clone();
                run.target_paused_at = t.paused_at;
                run.target_capacity = t.capacity;
            }
        }
    }
}

/// Runs holding a target, grouped by target and kind.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct TargetHold {
    pub target: String,
    pub exclusive: bool,
    /// The first and last holders, named in waiting causes.
    pub holder: i64,
    pub last: i64,
    pub n: i64,
}

/// Runs holding a slot of a plan.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct PlanHold {
    pub plan_id: i64,
    pub n: i64,
}

/// A holder that carries a version (the version gate needs each one).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct VersionHold {
    pub id: i64,
    pub target: String,
    pub version: String,
}

/// A versioned task whose latest run ended FAILED or CANCELED and that
/// nobody skipped: it halts every larger version on its target.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct Halt {
    pub target: String,
    pub version: String,
    pub status: String,
}

/// Everything AVAILABLE or RUNNING, summarised: a busy system holds many
/// such runs, and the gates only need counts and one name per group.
#[derive(Debug, Clone, Default)]
pub struct Holders {
    pub targets: Vec<TargetHold>,
    pub plans: Vec<PlanHold>,
    pub versions: Vec<VersionHold>,
    /// Read with the versions: what halts each target's version line.
    pub halts: Vec<Halt>,
}

/// The holder summaries a round reads besides the targets: each reads every
/// AVAILABLE and RUNNING run, thousands on a busy system, and each only
/// matters to some PENDING runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summaries {
    /// Plan slots: only a run whose plan has a limit checks them (gate 4).
    pub plans: bool,
    /// Holders' versions and halted versions: only a versioned run
    /// compares them (gate 2).
    pub versions: bool,
}

impl Summaries {
    pub fn needed_by(pending: &[PendingRun]) -> Self {
        let judged = || pending.iter().filter(|r| !r.held);
        Summaries {
            plans: judged().any(|r| r.parallel_limit.is_some()),
            versions: judged().any(|r| r.version.is_some()),
        }
    }
}

/// Which node labels live replicas carry, and when a label was last seen.
#[derive(Debug, Clone, Default)]
pub struct NodeLabels {
    pub live: HashSet<String>,
    /// Last heartbeat of any replica (live or not) carrying each label;
    /// for a drained one, when its drain began.
    pub last_seen: HashMap<String, Ts>,
    /// Labels of workers an operator drains (not live because of it).
    pub draining: HashSet<String>,
}

impl NodeLabels {
    /// From the replicas' labels and last heartbeats: live = a heartbeat
    /// within `stale_after` of `now`.
    pub fn from_heartbeats<'a>(
        replicas: impl IntoIterator<Item = (&'a [String], Ts)>,
        stale_after: std::time::Duration,
        now: Ts,
    ) -> NodeLabels {
        let mut nodes = NodeLabels::default();
        let live_since = now.minus(stale_after);
        for (labels, last_heartbeat) in replicas {
            for label in labels {
                if last_heartbeat >= live_since {
                    nodes.live.insert(label.clone());
                }
                let seen = nodes
                    .last_seen
                    .entry(label.clone())
                    .or_insert(last_heartbeat);
                *seen = (*seen).max(last_heartbeat);
            }
        }
        nodes
    }

    /// Adds a worker an operator drains since `since`: its labels are not
    /// live, and count as last seen when the drain began, as if the
    /// worker had died then (docs/agents.md, "Draining").
    pub fn with_drained<'a>(
        mut self,
        drained: impl IntoIterator<Item = (&'a [String], Ts)>,
    ) -> Self {
        for (labels, since) in drained {
            for label in labels {
                self.draining.insert(label.clone());
                let seen = self.last_seen.entry(label.clone()).or_insert(since);
                *seen = (*seen).max(since);
            }
        }
        self
    }

    /// "last seen 3 min ago", "drained 12 s ago" or "never seen".
    fn seen(&self, label: &str, now: Ts) -> String {
        match (self.last_seen.get(label), self.draining.contains(label)) {
            (Some(at), true) => format!("drained {}", ago(*at, now)),
            (Some(at), false) => format!("last seen {}", ago(*at, now)),
            (None, _) => "never seen".to_owned(),
        }
    }
}

/// What one round decided.
#[derive(Debug, Default, PartialEq)]
pub struct Decisions {
    /// Runs to move PENDING → AVAILABLE, in id order.
    pub promote: Vec<i64>,
    /// Runs that stay PENDING and whose waiting cause changed.
    pub causes: Vec<(i64, String)>,
    /// Pinned runs that waited `reassign_after` for their node and may now
    /// run on any replica, with the event detail saying so.
    pub unpin: Vec<(i64, String)>,
}

/// The cause every run carries from its creation until the first round.
pub const CAUSE_NEW: &str = "waiting for the scheduler's next round";

/// Decides one promotion round. `pending` must be ordered by id (oldest
/// first: first come, first served).
pub fn evaluate(
    pending: &[PendingRun],
    holders: &Holders,
    nodes: &NodeLabels,
    now: Ts,
) -> Decisions {
    let mut out = Decisions::default();
    // Pins that ran out are dropped first, so the run is judged (and
    // possibly promoted) as unpinned in this very round.
    let runs: Vec<Cow<PendingRun>> = pending
        .iter()
        .filter(|run| !run.held)
        .map(
            |run| match run.pin().and_then(|pin| pin_expired(&pin, nodes, now)) {
                Some(detail) => {
                    out.unpin.push((run.id, detail));
                    Cow::Owned(PendingRun {
                        node: None,
                        ..run.clone()
                    })
                }
                None => Cow::Borrowed(run),
            },
        )
        .collect();
    let lines = version_lines(pending, &holders.versions);
    let halts = halt_lines(&holders.halts);
    let mut targets: HashMap<&str, TargetState> = HashMap::new();
    for h in &holders.targets {
        let state = targets.entry(&h.target).or_default();
        if h.exclusive {
            state.exclusive = Some(h.holder);
        } else {
            state.shared = Some(h.holder);
            state.shared_last = state.shared_last.max(Some(h.last));
            state.shared_count += usize::try_from(h.n).unwrap_or(0);
        }
    }
    let mut plan_active: HashMap<i64, i64> =
        holders.plans.iter().map(|p| (p.plan_id, p.n)).collect();

    for run in &runs {
        let run: &PendingRun = run;
        let active = plan_active.get(&run.plan_id).copied().unwrap_or(0);
        let target = targets.entry(&run.target).or_default();
        // Pause and approval come before the target: a run that may not
        // start for those reasons must not reserve its target either.
        let blocked = scheduled_later(run, now)
            .or_else(|| paused(run))
            .or_else(|| awaiting_approval(run))
            .or_else(|| halted(run, &halts))
            .or_else(|| older_version_first(run, &lines))
            .or_else(|| target.refuses(run))
            .or_else(|| limit_reached(run, active))
            .or_else(|| node_missing(run, nodes, now));
        match blocked {
            None => {
                target.hold(run.id, run.exclusive);
                *plan_active.entry(run.plan_id).or_default() += 1;
                out.promote.push(run.id);
            }
            Some(Blocked::Target(cause, reserved)) => {
                // First come, first served: an exclusive run kept out only by
                // the lock reserves the target, so a stream of later shared
                // runs cannot starve it.
                if run.exclusive
                    && limit_reached(run, active).is_none()
                    && node_missing(run, nodes, now).is_none()
                {
                    target.reserve(run.id);
                }
                // Only the first in line names what holds the target; the
                // others name the run just ahead of them, which stays the
                // same until that run moves. Naming the holder in every
                // cause rewrote the cause of each waiting run on every
                // finish: a 40,000-task plan on one target rewrote ~40,000
                // rows a round.
                let cause = match target.last_in_line.replace(run.id) {
                    // Kept out only by the reservation of the run right
                    // ahead: the gate's own words say more.
                    Some(ahead) if reserved && target.reserved_for == Some(ahead) => cause,
                    Some(ahead) => format!("{} is busy; in line after run #{ahead}", run.target),
                    None => cause,
                };
                note_cause(&mut out, run, cause);
            }
            Some(Blocked::Other(cause)) => note_cause(&mut out, run, cause),
        }
    }
    out
}

enum Blocked {
    /// Kept out by the target lock (gate 3); `true` when only by an earlier
    /// run's reservation.
    Target(String, bool),
    Other(String),
}

fn note_cause(out: &mut Decisions, run: &PendingRun, cause: String) {
    if run.waiting_cause.as_deref() != Some(cause.as_str()) {
        out.causes.push((run.id, cause));
    }
}

/// Gate 1: `run_at <= now`. A retry's `run_at` is the end of its
/// backoff, and says so: "scheduled for 14:02:07" read like the time it
/// would start.
fn scheduled_later(run: &PendingRun, now: Ts) -> Option<Blocked> {
    let at = run.run_at?;
    (at > now).then(|| {
        let at = describe_time(at, now);
        Blocked::Other(if run.attempt > 1 {
            format!(
                "retry backoff: attempt {} may start after {at}",
                run.attempt
            )
        } else {
            format!("scheduled for {at}")
        })
    })
}

fn describe_time(at: Ts, now: Ts) -> String {
    if at.0.date_naive() == now.0.date_naive() {
        at.clock()
    } else {
        at.0.format("%Y-%m-%d %H:%M:%SZ").to_string()
    }
}

/// Gate 8: the operator's brake on the plan or the target.
fn paused(run: &PendingRun) -> Option<Blocked> {
    let at = |at: Option<Ts>| {
        at.map(|at| format!(" at {}", at.0.format("%Y-%m-%d %H:%M:%SZ")))
            .unwrap_or_default()
    };
    if let Some(by) = &run.plan_paused_by {
        let at = at(run.plan_paused_at);
        return Some(Blocked::Other(format!("plan paused by {by}{at}")));
    }
    let by = run.target_paused_by.as_ref()?;
    let at = at(run.target_paused_at);
    Some(Blocked::Other(format!(
        "target {} paused by {by}{at}",
        run.target
    )))
}

/// The cause of gate 7.
pub const CAUSE_APPROVAL: &str = "waits for approval";

/// Gate 7: an operator must approve the task first.
fn awaiting_approval(run: &PendingRun) -> Option<Blocked> {
    run.approval_pending
        .then(|| Blocked::Other(CAUSE_APPROVAL.to_owned()))
}

/// Each target's halted versions, smallest first.
fn halt_lines(halts: &[Halt]) -> HashMap<&str, Vec<&Halt>> {
    let mut lines: HashMap<&str, Vec<&Halt>> = HashMap::new();
    for h in halts {
        lines.entry(h.target.as_str()).or_default().push(h);
    }
    for line in lines.values_mut() {
        line.sort_by(|a, b| version::compare(&a.version, &b.version));
    }
    lines
}

/// Gate 2, halt on failure: a smaller version on the target ended FAILED
/// or CANCELED and was neither retried nor skipped. The cause names the
/// smallest, which is where the operator has to act.
fn halted(run: &PendingRun, halts: &HashMap<&str, Vec<&Halt>>) -> Option<Blocked> {
    let version = run.version.as_deref()?;
    let first = halts.get(run.target.as_str())?.first()?;
    (version::compare(&first.version, version) == Ordering::Less).then(|| {
        Blocked::Other(format!(
            "blocked: version {} on {} {} — retry or skip it",
            first.version, run.target, first.status
        ))
    })
}

/// Every unfinished run's version on each target, in version order (ties
/// by run id).
fn version_lines<'a>(
    pending: &'a [PendingRun],
    holders: &'a [VersionHold],
) -> HashMap<&'a str, Vec<(&'a str, i64)>> {
    let mut lines: HashMap<&str, Vec<(&str, i64)>> = HashMap::new();
    let all = pending
        .iter()
        .map(|r| (r.target.as_str(), r.version.as_deref(), r.id))
        .chain(
            holders
                .iter()
                .map(|h| (h.target.as_str(), Some(h.version.as_str()), h.id)),
        );
    for (target, version, id) in all {
        if let Some(version) = version {
            lines.entry(target).or_default().push((version, id));
        }
    }
    for line in lines.values_mut() {
        line.sort_by(|(va, ia), (vb, ib)| version::compare(va, vb).then(ia.cmp(ib)));
    }
    lines
}

/// Gate 2: no smaller version on the target is PENDING, AVAILABLE or
/// RUNNING. The cause names the nearest smaller version, not the smallest:
/// it stays the same until that very run finishes, so one finish rewrites
/// one cause rather than the cause of every later version.
fn older_version_first(
    run: &PendingRun,
    lines: &HashMap<&str, Vec<(&str, i64)>>,
) -> Option<Blocked> {
    let version = run.version.as_deref()?;
    let line = lines.get(run.target.as_str())?;
    let smaller = line.partition_point(|(v, _)| version::compare(v, version) == Ordering::Less);
    let (nearest, _) = *line.get(smaller.checked_sub(1)?)?;
    // Of several runs with that version, the first.
    let first = line.partition_point(|(v, _)| version::compare(v, nearest) == Ordering::Less);
    let (_, id) = line[first];
    Some(Blocked::Other(format!(
        "waits for run #{id} (version {nearest}) on {}",
        run.target
    )))
}

/// Gate 4: AVAILABLE + RUNNING in the plan stays below its limit.
fn limit_reached(run: &PendingRun, active: i64) -> Option<Blocked> {
    let limit = run.parallel_limit?;
    (active >= limit).then(|| Blocked::Other(format!("plan limit {limit} reached")))
}

/// Gate 5: some live replica or agent carries the run's node label.
fn node_missing(run: &PendingRun, nodes: &NodeLabels, now: Ts) -> Option<Blocked> {
    let label = run.node.as_deref()?;
    if nodes.live.contains(label) {
        return None;
    }
    let seen = nodes.seen(label, now);
    let then = match run.pin().and_then(|pin| pin_released_at(&pin, nodes)) {
        Some(at) => format!("runs anywhere {}", from_now(at, now)),
        None => "pinned for good (reassign_after: never)".to_owned(),
    };
    Some(Blocked::Other(format!(
        "no live replica or agent labelled {label} ({seen}); {then}"
    )))
}

/// A run's pin to a node label, as the node gate judges it: PENDING runs
/// in a promotion round, AVAILABLE ones in a sweep ([`PinnedRun`]).
pub struct Pin<'a> {
    pub node: &'a str,
    /// `None`: pinned for good.
    pub reassign_after_ms: Option<i64>,
    pub created_at: Ts,
}

impl PendingRun {
    fn pin(&self) -> Option<Pin<'_>> {
        Some(Pin {
            node: self.node.as_deref()?,
            reassign_after_ms: self.reassign_after_ms,
            created_at: self.created_at,
        })
    }
}

/// An AVAILABLE run pinned to a node label. Its replica may have died,
/// or shut down and handed it back, after it was promoted: if no live
/// replica carries the label it loses its pin after `reassign_after`, as a
/// PENDING run does, or nothing could ever claim it.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct PinnedRun {
    pub id: i64,
    pub node: String,
    pub reassign_after_ms: Option<i64>,
    pub created_at: Ts,
}

/// Those of `runs` whose pin expired at `now`, with the event detail.
pub fn stranded(runs: &[PinnedRun], nodes: &NodeLabels, now: Ts) -> Vec<(i64, String)> {
    runs.iter()
        .filter_map(|run| {
            let pin = Pin {
                node: &run.node,
                reassign_after_ms: run.reassign_after_ms,
                created_at: run.created_at,
            };
            pin_expired(&pin, nodes, now).map(|detail| (run.id, detail))
        })
        .collect()
}

/// When a pinned run whose node is missing may run anywhere: its
/// `reassign_after` counted from the later of the label's last heartbeat
/// and the run's creation (invariant 7 in docs/design.md: nothing waits
/// forever on a dead node).
fn pin_released_at(pin: &Pin, nodes: &NodeLabels) -> Option<Ts> {
    let wait = std::time::Duration::from_millis(u64::try_from(pin.reassign_after_ms?).ok()?);
    let since = nodes
        .last_seen
        .get(pin.node)
        .map_or(pin.created_at, |seen| (*seen).max(pin.created_at));
    Some(since.plus(wait))
}

/// The event detail when a pin expires.
fn pin_expired(pin: &Pin, nodes: &NodeLabels, now: Ts) -> Option<String> {
    let label = pin.node;
    if nodes.live.contains(label) {
        return None;
    }
    let at = pin_released_at(pin, nodes)?;
    if at > now {
        return None;
    }
    let wait = humantime::format_duration(std::time::Duration::from_millis(
        pin.reassign_after_ms.unwrap_or(0).max(0) as u64,
    ));
    let seen = nodes.seen(label, now);
    Some(format!(
        "pin to node {label} dropped: no live replica carried it for {wait} ({seen}); any replica may run it"
    ))
}

fn from_now(at: Ts, now: Ts) -> String {
    let secs = (at.0 - now.0).num_seconds().max(0);
    match secs {
        0..=59 => format!("in {secs} s"),
        60..=3599 => format!("in {} min", secs / 60),
        _ => format!("in {} h", secs / 3600),
    }
}

fn ago(at: Ts, now: Ts) -> String {
    let secs = (now.0 - at.0).num_seconds().max(0);
    match secs {
        0..=59 => format!("{secs} s ago"),
        60..=3599 => format!("{} min ago", secs / 60),
        _ => format!("{} h ago", secs / 3600),
    }
}

/// Gate 3 bookkeeping for one target: a reader-writer lock.
#[derive(Default)]
struct TargetState {
    /// The exclusive run holding the target.
    exclusive: Option<i64>,
    /// Some non-exclusive run holding the target (the first), the last,
    /// and how many do.
    shared: Option<i64>,
    shared_last: Option<i64>,
    shared_count: usize,
    /// An earlier exclusive run waiting only for the lock.
    reserved_for: Option<i64>,
    /// The latest run this round kept out by the lock.
    last_in_line: Option<i64>,
}

impl TargetState {
    fn hold(&mut self, id: i64, exclusive: bool) {
        if exclusive {
            self.exclusive = Some(id);
        } else {
            self.shared = Some(self.shared.map_or(id, |first| first.min(id)));
            self.shared_last = self.shared_last.max(Some(id));
            self.shared_count += 1;
        }
    }

    fn reserve(&mut self, id: i64) {
        self.reserved_for.get_or_insert(id);
    }

    fn refuses(&self, run: &PendingRun) -> Option<Blocked> {
        let holder = if run.exclusive {
            self.exclusive.or(self.shared)
        } else {
            self.exclusive
        };
        if let Some(holder) = holder {
            let others = if run.exclusive && self.exclusive.is_none() && self.shared_count > 1 {
                format!(" and {} more", self.shared_count - 1)
            } else {
                String::new()
            };
            return Some(Blocked::Target(
                format!("{} is busy with run #{holder}{others}", run.target),
                false,
            ));
        }
        // Gate 9: a shared run needs a free unit of the target's capacity
        // (an exclusive run, checked above, needs all of it).
        if let (Some(capacity), Some(first)) = (run.target_capacity, self.shared)
            && !run.exclusive
            && self.shared_count >= usize::try_from(capacity).unwrap_or(usize::MAX)
        {
            let last = self.shared_last.unwrap_or(first);
            let runs = match self.shared_count {
                1 => format!("run #{first}"),
                2 => format!("runs #{first}, #{last}"),
                n => format!("runs #{first}, #{last} and {} more", n - 2),
            };
            return Some(Blocked::Target(
                format!(
                    "{} is at capacity {}/{capacity} ({runs})",
                    run.target, self.shared_count
                ),
                false,
            ));
        }
        self.reserved_for.map(|first| {
            Blocked::Target(
                format!(
                    "{} is reserved for run #{first}, which is earlier in line",
                    run.target
                ),
                true,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An AVAILABLE or RUNNING run: it holds its target and a plan slot.
    #[derive(Debug, Clone)]
    struct HolderRun {
        id: i64,
        plan_id: i64,
        target: String,
        exclusive: bool,
        version: Option<String>,
    }

    impl Holders {
        /// Summarises individual runs (what the three queries below compute).
        fn from_runs(runs: &[HolderRun]) -> Self {
            let mut targets: HashMap<(String, bool), TargetHold> = HashMap::new();
            let mut plans: HashMap<i64, i64> = HashMap::new();
            let mut versions = Vec::new();
            for r in runs {
                let hold = targets
                    .entry((r.target.clone(), r.exclusive))
                    .or_insert(TargetHold {
                        target: r.target.clone(),
                        exclusive: r.exclusive,
                        holder: r.id,
                        last: r.id,
                        n: 0,
                    });
                hold.holder = hold.holder.min(r.id);
                hold.last = hold.last.max(r.id);
                hold.n += 1;
                *plans.entry(r.plan_id).or_default() += 1;
                if let Some(v) = &r.version {
                    versions.push(VersionHold {
                        id: r.id,
                        target: r.target.clone(),
                        version: v.clone(),
                    });
                }
            }
            Holders {
                targets: targets.into_values().collect(),
                plans: plans
                    .into_iter()
                    .map(|(plan_id, n)| PlanHold { plan_id, n })
                    .collect(),
                versions,
                halts: Vec::new(),
            }
        }
    }

    fn pending(id: i64, plan: i64, target: &str) -> PendingRun {
        PendingRun {
            id,
            task_id: id,
            plan_id: plan,
            target: target.into(),
            exclusive: true,
            version: None,
            node: None,
            run_at: None,
            waiting_cause: Some(CAUSE_NEW.into()),
            parallel_limit: None,
            created_at: Ts::now(),
            reassign_after_ms: None,
            dependents: false,
            held: false,
            approval_pending: false,
            attempt: 1,
            plan_paused_by: None,
            plan_paused_at: None,
            target_paused_by: None,
            target_paused_at: None,
            target_capacity: None,
        }
    }

    fn holder(id: i64, plan: i64, target: &str, exclusive: bool) -> HolderRun {
        HolderRun {
            id,
            plan_id: plan,
            target: target.into(),
            exclusive,
            version: None,
        }
    }

    fn cause_of(d: &Decisions, id: i64) -> &str {
        &d.causes.iter().find(|(i, _)| *i == id).expect("a cause").1
    }

    #[test]
    fn exclusive_runs_take_a_target_one_at_a_time() {
        let runs = [
            pending(1, 1, "db/a"),
            pending(2, 1, "db/a"),
            pending(3, 1, "db/b"),
        ];
        let d = evaluate(
            &runs,
            &Holders::default(),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(d.promote, vec![1, 3]);
        assert_eq!(cause_of(&d, 2), "db/a is busy with run #1");
    }

    #[test]
    fn a_finish_rewrites_one_waiting_cause_not_every_one() {
        let runs: Vec<_> = (1..=4).map(|i| pending(i, 1, "db/a")).collect();
        let holding = |id| Holders::from_runs(&[holder(id, 2, "db/a", true)]);
        let d = evaluate(&runs, &holding(90), &NodeLabels::default(), Ts::now());
        assert_eq!(cause_of(&d, 1), "db/a is busy with run #90");
        assert_eq!(cause_of(&d, 2), "db/a is busy; in line after run #1");
        assert_eq!(cause_of(&d, 4), "db/a is busy; in line after run #3");
        // The causes are stored; then the holder changes.
        let stored: Vec<_> = runs
            .into_iter()
            .map(|mut r| {
                r.waiting_cause = Some(cause_of(&d, r.id).to_owned());
                r
            })
            .collect();
        let d = evaluate(&stored, &holding(91), &NodeLabels::default(), Ts::now());
        let rewritten: Vec<i64> = d.causes.iter().map(|(id, _)| *id).collect();
        assert_eq!(rewritten, vec![1], "only the head names the holder");

        let versioned: Vec<_> = (1..=4)
            .map(|i| {
                let mut r = pending(i, 1, "db/v");
                r.version = Some(i.to_string());
                r
            })
            .collect();
        let d = evaluate(
            &versioned,
            &Holders::default(),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(d.promote, vec![1]);
        assert_eq!(cause_of(&d, 2), "waits for run #1 (version 1) on db/v");
        assert_eq!(cause_of(&d, 4), "waits for run #3 (version 3) on db/v");
    }

    #[test]
    fn shared_runs_run_together_but_not_beside_an_exclusive_one() {
        let mut a = pending(1, 1, "db/a");
        a.exclusive = false;
        let mut b = pending(2, 1, "db/a");
        b.exclusive = false;
        let d = evaluate(
            &[a.clone(), b.clone()],
            &Holders::default(),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(d.promote, vec![1, 2]);
        let d = evaluate(
            &[a],
            &Holders::from_runs(&[holder(9, 2, "db/a", true)]),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(cause_of(&d, 1), "db/a is busy with run #9");
    }

    #[test]
    fn a_waiting_exclusive_run_is_not_starved_by_later_shared_runs() {
        let first = pending(1, 1, "db/a");
        let mut later = pending(2, 1, "db/a");
        later.exclusive = false;
        let d = evaluate(
            &[first, later],
            &Holders::from_runs(&[holder(9, 2, "db/a", false)]),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert!(d.promote.is_empty());
        assert_eq!(
            cause_of(&d, 2),
            "db/a is reserved for run #1, which is earlier in line"
        );
    }

    #[test]
    fn versions_go_in_natural_order_across_plans() {
        let mut v10 = pending(1, 1, "db/a");
        v10.version = Some("10".into());
        let mut v2 = pending(2, 2, "db/a");
        v2.version = Some("2".into());
        let d = evaluate(
            &[v10, v2],
            &Holders::default(),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(d.promote, vec![2]);
        assert_eq!(cause_of(&d, 1), "waits for run #2 (version 2) on db/a");
    }

    #[test]
    fn plan_limit_counts_runs_promoted_this_round() {
        let mut runs: Vec<_> = (1..=4).map(|i| pending(i, 7, &format!("t{i}"))).collect();
        for r in &mut runs {
            r.parallel_limit = Some(2);
        }
        let d = evaluate(
            &runs,
            &Holders::from_runs(&[holder(9, 7, "x", true)]),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(d.promote, vec![1]);
        assert_eq!(cause_of(&d, 2), "plan limit 2 reached");
    }

    #[test]
    fn run_at_and_node_gates_say_why() {
        let now = Ts::now();
        let mut later = pending(1, 1, "a");
        later.run_at = Some(now.plus(std::time::Duration::from_secs(60)));
        let mut gpu = pending(2, 1, "b");
        gpu.node = Some("gpu".into());
        let mut nodes = NodeLabels::default();
        nodes
            .last_seen
            .insert("gpu".into(), now.minus(std::time::Duration::from_secs(180)));
        let d = evaluate(
            &[later.clone(), gpu.clone()],
            &Holders::default(),
            &nodes,
            now,
        );
        assert!(d.promote.is_empty());
        assert!(cause_of(&d, 1).starts_with("scheduled for "));
        // The same time on a retry is its backoff, not a start time.
        let retry = PendingRun {
            attempt: 3,
            ..later.clone()
        };
        let backoff = evaluate(&[retry], &Holders::default(), &nodes, now);
        let cause = cause_of(&backoff, 1);
        assert!(
            cause.starts_with("retry backoff: attempt 3 may start after "),
            "{cause}"
        );
        assert_eq!(
            cause_of(&d, 2),
            "no live replica or agent labelled gpu (last seen 3 min ago); pinned for good (reassign_after: never)"
        );
        nodes.live.insert("gpu".into());
        let d = evaluate(&[gpu], &Holders::default(), &nodes, now);
        assert_eq!(d.promote, vec![2]);
    }

    #[test]
    fn pinned_runs_run_anywhere_after_reassign_after() {
        let now = Ts::now();
        let minutes = |m: u64| std::time::Duration::from_secs(60 * m);
        let mut gpu = pending(1, 1, "a");
        gpu.node = Some("gpu".into());
        gpu.reassign_after_ms = Some(5 * 60 * 1000);
        gpu.created_at = now.minus(minutes(10));
        let mut nodes = NodeLabels::default();
        nodes.last_seen.insert("gpu".into(), now.minus(minutes(3)));
        let d = evaluate(&[gpu.clone()], &Holders::default(), &nodes, now);
        assert!(d.promote.is_empty() && d.unpin.is_empty());
        assert_eq!(
            cause_of(&d, 1),
            "no live replica or agent labelled gpu (last seen 3 min ago); runs anywhere in 2 min"
        );

        nodes.last_seen.insert("gpu".into(), now.minus(minutes(6)));
        let d = evaluate(&[gpu.clone()], &Holders::default(), &nodes, now);
        assert_eq!(d.promote, vec![1]);
        assert_eq!(d.unpin.len(), 1);
        assert!(
            d.unpin[0]
                .1
                .starts_with("pin to node gpu dropped: no live replica carried it for 5m"),
            "{}",
            d.unpin[0].1
        );

        // Never seen at all: counted from the run's creation.
        let fresh = PendingRun {
            created_at: now.minus(minutes(1)),
            ..gpu.clone()
        };
        let d = evaluate(&[fresh], &Holders::default(), &NodeLabels::default(), now);
        assert!(d.unpin.is_empty());
        assert!(cause_of(&d, 1).contains("never seen"));

        // Its only worker drained 1 min ago, heart-beating still: not
        // live, and the pin counts from the drain, as from a death.
        let labels = vec!["gpu".to_owned()];
        let drained = NodeLabels::from_heartbeats(
            std::iter::empty(),
            std::time::Duration::from_secs(10),
            now,
        )
        .with_drained([(labels.as_slice(), now.minus(minutes(1)))]);
        let d = evaluate(&[gpu.clone()], &Holders::default(), &drained, now);
        assert!(d.promote.is_empty() && d.unpin.is_empty());
        assert_eq!(
            cause_of(&d, 1),
            "no live replica or agent labelled gpu (drained 1 min ago); runs anywhere in 4 min"
        );
    }

    #[test]
    fn unchanged_causes_are_not_rewritten() {
        let mut waiting = pending(2, 1, "db/a");
        waiting.waiting_cause = Some("db/a is busy with run #1".into());
        let d = evaluate(
            &[waiting],
            &Holders::from_runs(&[holder(1, 1, "db/a", true)]),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(d, Decisions::default());
    }

    /// A round that skips the plan slots or the holders' versions, because
    /// no PENDING run needs them, decides exactly what a full round does.
    #[test]
    fn summaries_no_pending_run_needs_change_nothing() {
        let mut held_versioned = holder(20, 7, "db/a", true);
        held_versioned.version = Some("1".into());
        let mut shared_versioned = holder(21, 8, "db/b", false);
        shared_versioned.version = Some("3".into());
        let full = Holders::from_runs(&[
            held_versioned,
            shared_versioned,
            holder(22, 7, "db/c", false),
            holder(23, 9, "db/c", false),
        ]);
        let mut shared = pending(1, 7, "db/b");
        shared.exclusive = false;
        let round = [
            pending(2, 7, "db/a"),
            shared,
            pending(3, 9, "db/c"),
            pending(4, 8, "db/d"),
        ];
        assert_eq!(
            Summaries::needed_by(&round),
            Summaries {
                plans: false,
                versions: false
            }
        );
        let skipped = Holders {
            plans: Vec::new(),
            versions: Vec::new(),
            halts: Vec::new(),
            ..full.clone()
        };
        let now = Ts::now();
        let nodes = NodeLabels::default();
        let decided = evaluate(&round, &skipped, &nodes, now);
        assert_eq!(decided, evaluate(&round, &full, &nodes, now));
        assert_eq!(decided.promote, vec![1, 4]);

        let mut limited = round.clone();
        limited[0].parallel_limit = Some(1);
        limited[2].version = Some("2".into());
        assert_eq!(
            Summaries::needed_by(&limited),
            Summaries {
                plans: true,
                versions: true
            }
        );
    }

    #[test]
    fn a_failed_version_halts_every_larger_one_on_its_target() {
        let versioned = |id, v: &str, target: &str| {
            let mut r = pending(id, 1, target);
            r.version = Some(v.into());
            r
        };
        let holders = Holders {
            halts: vec![Halt {
                target: "db/orders".into(),
                version: "0041".into(),
                status: "FAILED".into(),
            }],
            ..Holders::default()
        };
        let runs = [
            versioned(1, "0040", "db/orders"),
            versioned(2, "0042", "db/orders"),
            versioned(3, "0043", "db/orders"),
            versioned(4, "0042", "db/users"),
        ];
        let d = evaluate(&runs, &holders, &NodeLabels::default(), Ts::now());
        assert_eq!(
            d.promote,
            vec![1, 4],
            "a smaller version and another target run"
        );
        for id in [2, 3] {
            assert_eq!(
                cause_of(&d, id),
                "blocked: version 0041 on db/orders FAILED — retry or skip it"
            );
        }
    }

    #[test]
    fn paused_and_unapproved_runs_wait_without_reserving_their_target() {
        let mut paused_plan = pending(1, 1, "db/a");
        paused_plan.plan_paused_by = Some("alice".into());
        let mut unapproved = pending(2, 2, "db/a");
        unapproved.approval_pending = true;
        let mut paused_target = pending(3, 3, "db/b");
        paused_target.target_paused_by = Some("bob".into());
        let mut shared = pending(4, 4, "db/a");
        shared.exclusive = false;
        let d = evaluate(
            &[paused_plan, unapproved, paused_target, shared],
            &Holders::from_runs(&[holder(9, 9, "db/a", false)]),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(
            d.promote,
            vec![4],
            "no reservation by a paused or unapproved run"
        );
        assert_eq!(cause_of(&d, 1), "plan paused by alice");
        assert_eq!(cause_of(&d, 2), CAUSE_APPROVAL);
        assert_eq!(cause_of(&d, 3), "target db/b paused by bob");
    }

    #[test]
    fn capacity_counts_shared_runs_and_runs_promoted_this_round() {
        let shared = |id| {
            let mut r = pending(id, 1, "db/a");
            r.exclusive = false;
            r.target_capacity = Some(3);
            r
        };
        let d = evaluate(
            &[shared(1), shared(2), shared(3)],
            &Holders::from_runs(&[holder(8, 2, "db/a", false)]),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(d.promote, vec![1, 2]);
        assert_eq!(
            cause_of(&d, 3),
            "db/a is at capacity 3/3 (runs #1, #8 and 1 more)"
        );

        let d = evaluate(
            &[shared(1)],
            &Holders::from_runs(&[holder(8, 2, "db/a", false), holder(9, 2, "db/a", false)]),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(d.promote, vec![1]);
        let mut two = shared(1);
        two.target_capacity = Some(2);
        let d = evaluate(
            &[two],
            &Holders::from_runs(&[holder(8, 2, "db/a", false), holder(9, 2, "db/a", false)]),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert_eq!(cause_of(&d, 1), "db/a is at capacity 2/2 (runs #8, #9)");
    }

    #[test]
    fn a_held_run_is_never_promoted_but_its_version_holds_larger_ones() {
        let mut held = pending(1, 1, "db/v");
        held.version = Some("1".into());
        held.held = true;
        held.waiting_cause = Some("waits for prep (RUNNING)".into());
        let mut later = pending(2, 2, "db/v");
        later.version = Some("2".into());
        let d = evaluate(
            &[held, later],
            &Holders::default(),
            &NodeLabels::default(),
            Ts::now(),
        );
        assert!(d.promote.is_empty());
        assert_eq!(cause_of(&d, 2), "waits for run #1 (version 1) on db/v");
        assert!(
            d.causes.iter().all(|(id, _)| *id != 1),
            "a held cause is the dependency's"
        );
    }
}
