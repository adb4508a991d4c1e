//! The PostgreSQL store: the high-availability deployment, where several
//! replicas share one database.
//!
//! Lists travel as arrays (`= ANY($1)`, `UNNEST`), transaction-scoped
//! advisory locks let one replica promote and one claim at a time, and a
//! status change records itself in the statement that makes it: the
//! ordinary path as stamps on the run's row ([`stamp_sql`]), every other
//! transition as an event row written by a data-modifying CTE. A batch
//! costs one round trip.

use crate::store::engine::plans::run_columns::run_copies_of_task;
use std::time::{Duration, Instant};

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Postgres, Transaction};

use crate::plan::NewPlan;
use crate::store::engine::audit::Asked;
use crate::store::engine::dialect::arguments;
use crate::store::engine::gates;
use crate::store::engine::liveness::{self, SweepCandidate};
use crate::store::engine::reads::overview;
use crate::store::engine::reads::rows::{self, ClaimRow, FinishedRow, millis};
use crate::store::engine::{Admit, Arg, Dialect, Made, RowLock, Shared, Sql, StoreRow};
use crate::store::signals::{CHANNEL, Signal};
use crate::store::{Actor, Backend, Beaten, Claim, Finish, LogLine, Result, SCHEDULER, StoreError};
use domain::gates::{ContextRow, Decisions, PendingRun};
use domain::time::Ts;

pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// Key of the advisory lock that serialises promotion rounds ("baton:p"),
/// as a literal so `concat!` can splice it into [`ROUND_BEGIN`].
macro_rules! promoter_lock_key {
    () => {
        "27691700431239792"
    };
}

/// [`promoter_lock_key`] as a number, for statements that bind it.
const PROMOTER_LOCK: i64 = 0x0062_6174_6f6e_3a70;

/// Key of the advisory lock that serialises claims ("baton:c"), as a
/// literal so `concat!` can splice it into [`CLAIM_LOCK`].
macro_rules! claim_lock_key {
    () => {
        "27691700431239779"
    };
}

/// How long a claimer waits for the claim lock before it goes around it
/// ([`CLAIM`]): far longer than any claim holds it (milliseconds), short
/// enough that a frozen holder costs seconds, not the cluster's progress.
macro_rules! claim_lock_timeout {
    () => {
        "2s"
    };
}

/// The number of a transition stamped on a run's row (its `*_seq`
/// column), drawn from the sequence of `run_event` ids: the id its event
/// row would have had, which orders it among a run's other transitions
/// and in the whole history (docs/design.md, "Status model";
/// `reads::history_sql`). Drawn per row as the statement writes it, so
/// one statement's stamps, like its event rows, are numbered in turn.
macro_rules! stamp_sql {
    () => {
        "nextval('run_event_id_seq')"
    };
}

/// What a claim sets on each run it takes (`r`, joined to its task `t`):
/// `$1` the replica, `$4` the start, `$5` the replica's heartbeat timeout
/// for tasks that set none, and the claim's stamp (the replica and start
/// are the rest of it). Shared by [`claim_sql`] and [`ROUND_CLAIM`].
macro_rules! claim_set_sql {
    () => {
        concat!(
            "status = 'RUNNING', replica_id = $1, started_at = $4, last_heartbeat_at = $4,
            deadline = $4 + r.timeout_ms * INTERVAL '1 millisecond',
            heartbeat_deadline = $4 + ",
            rows::heartbeat_timeout_sql!("$5"),
            " * INTERVAL '1 millisecond', claimed_seq = ",
            stamp_sql!()
        )
    };
}

/// The claim's row of `claim_log`, listing the runs the CTE `claimed`
/// took (docs/design.md, "Run storage"): what makes them readable as
/// RUNNING (the view `running_run`). None for a claim that took nothing.
macro_rules! claim_logged_sql {
    () => {
        "claim_logged AS (
        INSERT INTO claim_log (runs) SELECT array_agg(id ORDER BY id) FROM claimed
        HAVING COUNT(*) > 0)"
    };
}

/// The rows of `finish_log` for the runs the CTE `$ended` (with `id` and
/// `status`) ended at `$at`, one per final status: what the overview's
/// counts per minute read.
macro_rules! finish_logged_sql {
    ($ended:literal, $at:literal) => {
        concat!(
            "finish_logged AS (
        INSERT INTO finish_log (finished_at, status, runs)
        SELECT ",
            $at,
            ", status, array_agg(id ORDER BY id) FROM ",
            $ended,
            " GROUP BY status)"
        )
    };
}

/// What a claim returns of each run, as [`ClaimRow`]s.
macro_rules! claimed_columns_sql {
    () => {
        concat!(
            "r.id, r.task_id, r.plan_id, r.attempt, r.started_at, r.deadline,
            r.dependents, t.executor, t.heartbeat_interval_ms, ",
            rows::heartbeat_timeout_sql!("$5"),
            " AS heartbeat_timeout_ms"
        )
    };
}

/// A claim of the runs `$pick` (a subquery of ids) picks: each still
/// AVAILABLE is stamped as claimed ([`claim_set_sql`]) and returned, and
/// its queue row goes in the same statement, after its `task_run` row is
/// locked: every statement takes a run's row before its queue row
/// (`available_run`, docs/design.md, "Run storage"), so none waits for
/// another in the opposite order. Shared by [`claim_sql`] and
/// [`CLAIM_MIXED`].
macro_rules! claim_picked_sql {
    ($pick:expr) => {
        concat!(
            "WITH claimed AS (
        UPDATE task_run r SET ",
            claim_set_sql!(),
            "
        FROM task t
        WHERE r.id = ANY(ARRAY(",
            $pick,
            "))
            AND r.status = 'AVAILABLE' AND t.id = r.task_id
        RETURNING ",
            claimed_columns_sql!(),
            "),
    dequeued AS (
        DELETE FROM available_run WHERE run_id = ANY(ARRAY(SELECT id FROM claimed))),
    ",
            claim_logged_sql!(),
            "
    SELECT * FROM claimed ORDER BY id"
        )
    };
}

/// The claim statement ([`CLAIM`], [`CLAIM_TRIED`], [`CLAIM_AROUND`]):
/// picks from the queue of AVAILABLE runs, joined to `$join`; `$only_if`
/// narrows the pick and `$row_locks` follows it.
macro_rules! claim_sql {
    ($join:literal, $only_if:expr, $row_locks:literal) => {
        claim_picked_sql!(concat!(
            "
                SELECT q.run_id FROM available_run q",
            $join,
            "
                WHERE (q.node IS NULL OR q.node = ANY($2))",
            $only_if,
            "
                ORDER BY q.run_id LIMIT $3",
            $row_locks
        ))
    };
}

/// A pool of at most `max` connections.
///
/// sqlx pings every connection it takes from the pool (a round trip) and
/// again when it is given back. The second stays: it flushes the rollback
/// of a dropped transaction. The first is kept only for a connection idle
/// long enough for the server to have gone away (a restart, a dropped
/// idle socket): on a busy replica it was one round trip more in every
/// claim, finish, round and submit, three of them between a submit and
/// its run's start. A connection that died while in use still fails its
/// statement and is closed at its release, as before.
fn pool_options(max: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > PING_IDLE_AFTER {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// Connections per replica: the loops, the API and a few spares.
const DEFAULT_POOL_SIZE: u32 = 12;

/// Connections per replica kept for liveness writes (its heartbeat, its
/// runs' and its agents' heartbeats, the leader lease): see
/// [`PgStore::liveness`].
const LIVENESS_POOL_SIZE: u32 = 3;

/// A pooled connection idle for longer than this is pinged before use;
/// one used more recently is not ([`PgStore::connect_with`]).
const PING_IDLE_AFTER: Duration = Duration::from_secs(1);

/// Keeps the rest of a transaction on its indexes; a literal, so a
/// `BEGIN` can carry it.
///
/// task_run's status mix changes far faster than autovacuum refreshes
/// its statistics: after a burst the planner may believe the table holds
/// a few hundred rows, or that nothing is AVAILABLE, and pick a
/// sequential or bitmap scan that reads (and sorts) every run — seen
/// here as claims taking seconds. The claim, finish and promotion
/// statements each have one right plan (a live-status partial index or
/// the primary key), so for them those scans are ruled out. Broader
/// queries (plan lists, replica counts) keep the planner's choice.
///
/// This cannot fix a join order: a batch joined to `task_run` as a CTE
/// may still be rescanned once per row of a partial index the planner
/// thinks is empty. Batches of ids therefore reach `task_run` as arrays
/// (`= ANY(…)`), as the claim does ([`CLAIM`]).
///
/// A scan ruled out but left as the only way to read a table (a handful
/// of target settings has no index worth scanning) is costed at 10^10,
/// far past PostgreSQL's JIT thresholds: that is one reason JIT is off
/// on every connection ([`PgStore::connect_with`]).
///
/// Nor does any of them share its work among parallel workers. Each reads
/// a few pages by index, but a table never analyzed since a burst filled
/// it is estimated at 0.5 % of its rows per equality: with 100,000 runs
/// queued, a round's read of PENDING runs expected 640 of them, none
/// there, and launched two workers every round, forked by the server for
/// 10–25 ms each time (`auto_explain`); a full queue of 100,000 burned
/// down 1.30 times as fast without them (docs/benchmarks.md).
macro_rules! index_only_sql {
    () => {
        "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; \
        SET LOCAL max_parallel_workers_per_gather = 0"
    };
}
/// The settings of [`PgStore::hash_joined`].
macro_rules! hash_joined_sql {
    () => {
        concat!(index_only_sql!(), "; SET LOCAL enable_nestloop = off")
    };
}

const BEGIN_INDEX_ONLY: &str = concat!("BEGIN; ", index_only_sql!());
const BEGIN_HASH_JOINED: &str = concat!("BEGIN; ", hash_joined_sql!());
/// A heartbeat waits this long for a lock, then says so
/// ([`StoreError::is_lock_wait`]) and is sent again: proof to its replica
/// that the database answers and that the sweeper is held up as it is.
/// Each proof counts from when its attempt was sent, so this must stay
/// well under half of what a replica trusts a proof for (three quarters
/// of `stale_after`, 750 ms in the fastest settings the tests use).
macro_rules! heartbeat_lock_timeout_sql {
    () => {
        "SET LOCAL lock_timeout = '200ms'"
    };
}
const BEGIN_HEARTBEAT: &str = concat!("BEGIN; ", heartbeat_lock_timeout_sql!());
/// The sweeper's first statements: the write lock on the tables the
/// replicas' and runs' heartbeats write, waited for a second at most (a round that waits is
/// judged by `engine::execution::endings::run_sweep`, one that times out fails), then
/// no limit. Not part of its `BEGIN`: a `BEGIN` string that fails leaves
/// its connection in the aborted transaction, back in the pool.
const SWEEP_LOCKS: &str = "SET LOCAL lock_timeout = '1s'; \
    LOCK TABLE replica, task_run, held_run_heartbeat, held_replica_heartbeat \
        IN ROW EXCLUSIVE MODE; \
    SET LOCAL lock_timeout = 0";

/// A hot statement and the `BEGIN` of its transaction, which sets the
/// planner up for it (`index_only_sql` or [`PgStore::hash_joined`]).
/// Kept together so the store and `plan_tests` run the same pair.
struct Planned {
    begin: &'static str,
    sql: &'static str,
}

/// Tries the advisory lock whose key `$key!()` gives, inside a `BEGIN`,
/// and keeps the answer in the transaction setting `$setting`: a `BEGIN`
/// returns no rows, and a later statement of the transaction checks the
/// setting ([`holds_lock_sql`]) rather than ask in a round trip of its own.
macro_rules! try_lock_sql {
    ($setting:literal, $key:ident) => {
        concat!(
            "set_config('",
            $setting,
            "', pg_try_advisory_xact_lock(",
            $key!(),
            ")::text, true)"
        )
    };
}

/// The condition that [`try_lock_sql`] took the lock named `$setting`.
macro_rules! holds_lock_sql {
    ($setting:literal) => {
        concat!("current_setting('", $setting, "', true) = 'true'")
    };
}

/// Who: the promoter, first in each round: its transaction, which tries
/// the round's lock, keeps the round on its indexes (`index_only_sql`:
/// its reads start from the live-status partial indexes and its writes
/// look runs up by key) and lets the round commit without waiting for its
/// WAL to reach the disk. One round trip, the `BEGIN`'s own: whether the lock
/// was free is kept in the transaction's setting `baton.round_locked`,
/// which the round's first read checks ([`Dialect::PENDING_RUNS`]), rather
/// than answered in a round trip of its own. That read's snapshot is taken
/// after the lock, so it sees everything the previous round committed.
///
/// Everything a round writes (promotions, unpins, waiting causes and
/// their events) is derived from the rest of the database, so a round
/// lost in a crash is simply made again by the next one: its runs are
/// still PENDING. Nothing durable can rest on a lost round either: a
/// claim of a promoted run commits synchronously, and flushing its commit
/// record flushes the round's, which came before it. That is one disk
/// flush fewer between a submit and its run's start. Claims, finishes and
/// everything an operator does still wait for the disk.
const ROUND_BEGIN: &str = concat!(
    "BEGIN; ",
    index_only_sql!(),
    "; SELECT set_config('synchronous_commit', 'off', true), ",
    try_lock_sql!("baton.round_locked", promoter_lock_key)
);

/// How long a submit that may admit runs waits for the promotion lock
/// ([`ADMIT_LOCK_WAIT`]): a round in flight lasts milliseconds; one that
/// reads a queue of many thousands, longer than a submit should wait.
macro_rules! admit_lock_timeout {
    () => {
        "50ms"
    };
}

/// Who: a submit that may admit runs (`engine::gates::admission`), alone
/// ([`Dialect::plan_submit_alone`]), before its submit statement
/// ([`submit`]): takes the promotion lock, waiting at most
/// `admit_lock_timeout!` for a round, another submit or a brake, and
/// marks it held in `baton.admit_locked`, which that statement checks. A
/// statement of its own, so the submit's snapshot is taken after the
/// lock and sees everything the last round, pause or capacity change
/// committed. Past the wait the submit is made again without admission:
/// its runs are PENDING, for the round.
const ADMIT_LOCK_WAIT: &str = concat!(
    "SET LOCAL lock_timeout = '",
    admit_lock_timeout!(),
    "'; SELECT pg_advisory_xact_lock(",
    promoter_lock_key!(),
    "), set_config('baton.admit_locked', 'true', true); SET LOCAL lock_timeout = 0"
);

/// [`ADMIT_LOCK_WAIT`] for a submit inside a larger transaction
/// ([`Dialect::plan_write`]), which only tries the lock: one that already
/// holds the creation lock (shared) must not wait for it exclusively, or
/// two such submits would wait for each other.
const ADMIT_LOCK_TRY: &str = concat!(
    "SELECT ",
    try_lock_sql!("baton.admit_locked", promoter_lock_key)
);

/// Who: every replica's claimer, whenever it has free worker slots. The task
/// row is read once per run: for its heartbeat timeout and for the executor
/// the worker needs.
///
/// The picked ids reach the UPDATE as one array (an InitPlan), not as a
/// joined CTE. Joined, stale statistics (the last ANALYZE saw no AVAILABLE
/// run) let the planner put the whole AVAILABLE index on the outside of a
/// nested loop and rescan the CTE for every run in it: quadratic, 0.5 s per
/// claim of 512 out of 5,000 AVAILABLE runs, and the reason the bench fell
/// to 2,000 runs/s after its latency phase. As an array the ids can only be
/// looked up; `plan_tests` pins that down.
///
/// Claims are serialised across replicas by an advisory lock
/// ([`CLAIM_LOCK`]) instead of `FOR UPDATE SKIP LOCKED`. Under SKIP LOCKED each claim
/// locked every row it took before updating it (one more WAL record and
/// dirtied page per run), and all replicas woke to the same NOTIFY: the
/// losers walked past every row the winner had locked and mostly came away
/// empty. Serialised, the next claimer starts after the previous one
/// committed and finds only what is still AVAILABLE. The UPDATE's own
/// `status = 'AVAILABLE'` re-check stays the arbiter against a cancel that
/// commits in between. In one sitting's 8 alternating pairs of the
/// PostgreSQL bench (4 replicas), serialised claims won all 8, by a median
/// of 6 % end to end, with the submit → RUNNING latency no worse.
///
/// A replica frozen inside its claim (a VM pause, SIGSTOP) would hold the
/// lock until it thaws or its connection dies, and stop every replica's
/// claims with it. So the wait is bounded (`claim_lock_timeout!`); past it
/// a claimer takes [`CLAIM_AROUND`], which goes around the frozen claim's
/// rows with SKIP LOCKED.
const CLAIM: Planned = Planned {
    begin: BEGIN_INDEX_ONLY,
    sql: claim_sql!("", "", ""),
};

/// [`CLAIM`] with the claim lock tried in its `BEGIN`, the way most claims
/// start: the lock is free, and the claim costs one round trip less
/// before its runs are stamped as started (a pickup's path). Without the
/// lock it picks nothing (`baton.claim_locked`, checked once per
/// statement), and a claim that came away empty takes [`CLAIM_LOCK`] and
/// asks again ([`PgStore::runs_claim`]). A try does not jump the queue:
/// PostgreSQL refuses it while a claimer waits for the lock.
const CLAIM_TRIED: Planned = Planned {
    begin: concat!(
        "BEGIN; ",
        index_only_sql!(),
        "; SELECT ",
        try_lock_sql!("baton.claim_locked", claim_lock_key)
    ),
    sql: claim_sql!(
        "",
        concat!(" AND ", holds_lock_sql!("baton.claim_locked")),
        ""
    ),
};

/// Takes the claim lock in [`CLAIM`]'s transaction, waiting at most
/// `claim_lock_timeout!`. Not part of that `BEGIN`: a `BEGIN` string that
/// fails midway leaves its connection in an aborted transaction that sqlx
/// does not roll back.
const CLAIM_LOCK: &str = concat!(
    "SET LOCAL lock_timeout = '",
    claim_lock_timeout!(),
    "'; SELECT pg_advisory_xact_lock(",
    claim_lock_key!(),
    "); SET LOCAL lock_timeout = 0"
);

/// [`CLAIM`] without the claim lock, for when its holder does not let go:
/// rows are locked and skipped as other claimers hold them. The lock
/// holder's plain UPDATE waits for these row locks, then re-checks the
/// status, so the two kinds of claim never take the same run.
const CLAIM_AROUND: Planned = Planned {
    begin: BEGIN_INDEX_ONLY,
    sql: claim_sql!(
        " JOIN task_run a ON a.id = q.run_id",
        "",
        " FOR UPDATE OF a SKIP LOCKED"
    ),
};

/// [`CLAIM`] while a replica of an older build may write
/// (`engine::queue_repair`): such a replica makes runs AVAILABLE without
/// queueing them and claims them at once from `task_run` by status, so
/// this build's claimers pick from there too, or they would find only
/// what the older ones left. Around the claim lock, rows locked and
/// skipped as [`CLAIM_AROUND`]'s; the queue rows of the runs claimed go
/// as in every claim. With no index of `task_run` by status, each of
/// these claims reads the table in id order: a cost of the upgrade only.
const CLAIM_MIXED: Planned = Planned {
    begin: BEGIN_INDEX_ONLY,
    sql: claim_picked_sql!(
        "
                SELECT id FROM task_run
                WHERE status = 'AVAILABLE' AND (node IS NULL OR node = ANY($2))
                ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED"
    ),
};

/// Who: the replica that executed the runs, in batches, each end stamped
/// on its row. Fenced: only runs still RUNNING and owned by this replica
/// change. Hash-joined: the batch
/// is an `UNNEST`; `r.id = ANY($2)` lets the planner read just the batch
/// by key, rather than every RUNNING run, when its statistics show that is
/// cheaper.
const FINISH: Planned = Planned {
    begin: BEGIN_HASH_JOINED,
    // A run an operator asked to cancel ends CANCELED in their name,
    // unless its execution succeeded first ([`rows::cancel_status_sql`]).
    sql: concat!(
        "WITH f AS (
        SELECT * FROM UNNEST($2::bigint[], $3::text[], $4::bigint[], $5::text[])
            AS f(id, status, code, error)),
    ended AS (
    UPDATE task_run r SET status = ",
        rows::cancel_status_sql!("f.status", "r"),
        ", finished_at = $6, result_code = f.code,
            error = ",
        rows::cancel_error_sql!("f.status", "r", "f.error", "''"),
        ", ended_seq = ",
        stamp_sql!(),
        "
    FROM f WHERE r.id = f.id AND r.id = ANY($2) AND r.status = 'RUNNING'
        AND r.replica_id = $1
    RETURNING r.id, r.plan_id, r.status, r.task_id, r.attempt, r.max_attempts, r.dependents),
    ",
        finish_logged_sql!("ended", "$6"),
        "
    SELECT * FROM ended"
    ),
};

/// Who: the promoter, for the runs its round let through (each batch
/// joined to no other table, so the round's planner settings suit it),
/// each promotion stamped on its row and queued for claimers
/// (`available_run`). Returns how many moved, and when
/// any did queues the NOTIFY that wakes the other replicas' claimers
/// (`$3`, `$4`): in the statement, not after it, as a round trip less
/// between a submit and its run's start.
///
/// `pending_held = 0` (PENDING and not held, as the database derives
/// it) rather than `status = 'PENDING'` changes no outcome (the round
/// promotes only runs it read unheld, and a run never becomes held again)
/// but lets the PENDING index, `task_run_pending (pending_held, id)`, be
/// probed once per id. Without it,
/// `id = ANY` bound only that index's second column and each id read the
/// whole index: up to 68 buffers per run promoted with 30,000 PENDING, and
/// in a 100,000-run bench this statement took twice as long as before the
/// gates (the index was `(id)` then). `plan_tests` checks that a
/// promotion reads a few pages per run; it has not reproduced that plan.
const PROMOTE: Planned = Planned {
    begin: BEGIN_INDEX_ONLY,
    sql: concat!(
        "WITH moved AS (
        UPDATE task_run SET status = 'AVAILABLE', waiting_cause = NULL, available_at = $2,
            available_seq = ",
        stamp_sql!(),
        "
        WHERE id = ANY($1) AND pending_held = 0 RETURNING id, node),
    queued AS (
        INSERT INTO available_run (run_id, node) SELECT id, node FROM moved)
    SELECT c.n FROM (SELECT COUNT(*) AS n FROM moved) c,
        LATERAL (SELECT CASE WHEN c.n > 0 THEN pg_notify($3, $4) END) announced"
    ),
};

/// Who: the promoter, for the runs its round claims for its own replica
/// ([`Dialect::round_claim`]): PENDING → RUNNING in one statement, with the
/// promotion's stamp (`$3`) and the claim's (`$1`, `$4`), numbered in that
/// order: a row's new values are computed in column order, and the
/// promotion's column comes first (`tests/conformance/history.rs` reads
/// them back in order). Such a run never sits AVAILABLE: no claimer wakes
/// or asks for it, and its row is written once, not twice. The round's transaction
/// stops skipping the wait for the disk here (`ROUND_BEGIN` turned it
/// off): a claimed run executes, and must still be claimed after a crash.
/// The setting is made per claimed row, so a statement that moved nothing
/// leaves the round's commit as it was.
const ROUND_CLAIM: Planned = Planned {
    begin: BEGIN_INDEX_ONLY,
    sql: concat!(
        "WITH claimed AS (
        UPDATE task_run r SET waiting_cause = NULL, available_at = $3, available_seq = ",
        stamp_sql!(),
        ", ",
        claim_set_sql!(),
        "
        FROM task t
        WHERE r.id = ANY($2) AND r.pending_held = 0 AND t.id = r.task_id
        RETURNING ",
        claimed_columns_sql!(),
        "),
    ",
        claim_logged_sql!(),
        "
    SELECT * FROM claimed WHERE set_config('synchronous_commit', 'on', true) = 'on' ORDER BY id"
    ),
};

/// Who: the promoter, after [`ROUND_BEGIN`]: the round's PENDING runs
/// ([`Dialect::PENDING_RUNS`]) and, when there are any, its brakes and
/// target holders ([`gates::ROUND_CONTEXT`]), as one statement: one round
/// trip fewer between a submit and its run's start, and one snapshot for
/// both. Each row is a run or a context row (`kind`, [`RoundRow`]); the
/// context's columns follow the run's, NULL on a run's row and the other
/// way round. A round without the lock gets one `busy` row instead.
const ROUND_READS: &str = concat!(
    "WITH pending AS MATERIALIZED (",
    gates::pending_runs_sql!(holds_lock_sql!("baton.round_locked")),
    ")
    SELECT 'run' AS kind, pending.*, CAST(NULL AS BIGINT) AS capacity, CAST(NULL AS TEXT) AS paused_by,
        CAST(NULL AS TIMESTAMPTZ) AS paused_at, CAST(NULL AS BIGINT) AS holder,
        CAST(NULL AS BIGINT) AS last, CAST(NULL AS BIGINT) AS n
    FROM pending
    UNION ALL
    SELECT c.kind, NULL, NULL, c.plan_id, c.target, c.exclusive, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, c.capacity, c.paused_by, c.paused_at, c.holder, c.last, c.n
    FROM (",
    gates::round_context_sql!(),
    ") c WHERE EXISTS (SELECT FROM pending)
    UNION ALL
    SELECT 'busy', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    WHERE NOT ",
    holds_lock_sql!("baton.round_locked")
);

/// A row of [`ROUND_READS`].
enum RoundRow {
    Run(PendingRun),
    Context(ContextRow),
    /// The round did not get its lock.
    Busy,
}

impl<'r> sqlx::FromRow<'r, PgRow> for RoundRow {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        use sqlx::Row;
        Ok(match row.try_get::<&str, _>("kind")? {
            "run" => RoundRow::Run(PendingRun::from_row(row)?),
            "busy" => RoundRow::Busy,
            _ => RoundRow::Context(ContextRow::from_row(row)?),
        })
    }
}

/// Who: each replica's run heartbeat, one statement for all its runs.
/// Hash-joined, like [`FINISH`].
const RUN_HEARTBEAT: Planned = Planned {
    begin: concat!(
        "BEGIN; ",
        hash_joined_sql!(),
        "; ",
        heartbeat_lock_timeout_sql!()
    ),
    // Rows another transaction holds are skipped, not waited for: one held
    // row (an outside client's `SELECT … FOR UPDATE`) made every run of the
    // replica miss its beat and fail. Each run asked for comes back as
    // owned (beaten), busy (skipped) or neither (no longer this replica's).
    sql: "WITH free AS (
        SELECT id FROM task_run WHERE id = ANY($2) FOR UPDATE SKIP LOCKED),
    beaten AS (
        UPDATE task_run r SET last_heartbeat_at = $4,
            heartbeat_deadline = $4 + b.timeout_ms * INTERVAL '1 millisecond'
        FROM UNNEST($2::bigint[], $3::bigint[]) AS b(id, timeout_ms)
        WHERE r.id = b.id AND r.id IN (SELECT id FROM free) AND r.status = 'RUNNING'
            AND r.replica_id = $1
        RETURNING r.id, r.cancel_requested_by IS NOT NULL AS canceling)
    SELECT p.id, p.id IN (SELECT id FROM beaten) AS owned,
        p.id IN (SELECT id FROM beaten WHERE canceling) AS canceling
    FROM task_run p WHERE p.id = ANY($2)
        AND (p.id IN (SELECT id FROM beaten) OR p.id NOT IN (SELECT id FROM free))",
};

/// Who: a run heartbeat, for the rows [`RUN_HEARTBEAT`] found held. It
/// waits in each row's lock queue (for the heartbeat lock timeout, then is
/// sent again), so when an outside client lets go the beat is first to the
/// row; the sweeper skips held rows and never queues ahead of it. Rows of
/// runs another actor ended meanwhile come back as no longer owned.
const RUN_HEARTBEAT_HELD: Planned = Planned {
    begin: BEGIN_HEARTBEAT,
    sql: "UPDATE task_run r SET last_heartbeat_at = $4,
            heartbeat_deadline = $4 + b.timeout_ms * INTERVAL '1 millisecond'
        FROM UNNEST($2::bigint[], $3::bigint[]) AS b(id, timeout_ms)
        WHERE r.id = b.id AND r.status = 'RUNNING' AND r.replica_id = $1
        RETURNING r.id, r.cancel_requested_by IS NOT NULL AS canceling",
};

/// Who: a run heartbeat whose [`RUN_HEARTBEAT_HELD`] waited out its lock
/// timeout. It records the beat beside the held row (`held_run_heartbeat`,
/// migrations/postgres/0031_held_heartbeats.sql) for each run the row, as
/// last committed, still has RUNNING on this replica; the sweeper judges
/// the later deadline. Without it the row had no beat in its lock queue
/// between one wait and the next, and a holder letting go right then
/// handed it to a sweep, past its deadline: a live run failed. Runs it
/// does not name are no longer this replica's.
const HELD_RUN_HEARTBEAT: &str = "WITH owned AS (
        SELECT r.id, $4 + b.timeout_ms * INTERVAL '1 millisecond' AS deadline
        FROM task_run r JOIN UNNEST($2::bigint[], $3::bigint[]) AS b(id, timeout_ms)
            ON r.id = b.id
        WHERE r.status = 'RUNNING' AND r.replica_id = $1),
    recorded AS (
        INSERT INTO held_run_heartbeat (run_id, deadline) SELECT id, deadline FROM owned
        ON CONFLICT (run_id) DO UPDATE
            SET deadline = GREATEST(held_run_heartbeat.deadline, excluded.deadline))
    SELECT id FROM owned";

/// Who: a replica heartbeat held up by a lock (see
/// [`PgStore::held_replica_heartbeat`]). It does not read `replica`: under
/// a lock on the whole table that read waited as long again, and the
/// replica's proof lapsed between beats. A record of a replica without a
/// row (its first beat, held up) is pruned by the next sweep.
const HELD_REPLICA_HEARTBEAT: &str = "INSERT INTO held_replica_heartbeat (replica_id, at)
    VALUES ($1, $2)
    ON CONFLICT (replica_id) DO UPDATE SET at = GREATEST(held_replica_heartbeat.at, excluded.at)";

/// The runs of a heartbeat's beats, bound as `$2` of the run heartbeat
/// statements ([`RUN_HEARTBEAT`] and the two for held rows).
fn beat_ids(beats: &[(i64, Duration)]) -> Vec<i64> {
    beats.iter().map(|b| b.0).collect()
}

/// Their timeouts in milliseconds, `$3` of the same statements.
fn beat_timeouts(beats: &[(i64, Duration)]) -> Vec<i64> {
    beats.iter().map(|b| millis(b.1)).collect()
}

/// A `lock_timeout` ran out ([`crate::store::LOCK_NOT_AVAILABLE`]).
fn is_lock_timeout(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db)
        if db.code().as_deref() == Some(crate::store::LOCK_NOT_AVAILABLE))
}

pub struct PgStore {
    pool: PgPool,
    /// Connections only liveness writes take. Under an outside lock on
    /// the runs table, every read of it waits on a connection of `pool`
    /// (API requests, the dashboard, the loops), until none is free; a
    /// heartbeat that then waited for a connection was no lock wait, so
    /// it proved nothing, and the replica stopped its own commands while
    /// the leader's lease renewals starved (docs/design.md, "Liveness").
    liveness: PgPool,
    shared: Shared,
}

impl PgStore {
    /// Beats the runs whose rows [`RUN_HEARTBEAT`] found held, waiting for
    /// them (see [`RUN_HEARTBEAT_HELD`]); those still held after the lock
    /// timeout are beaten beside their rows ([`HELD_RUN_HEARTBEAT`]) and are
    /// [`Beaten::held`].
    async fn held_runs_heartbeat(
        &self,
        replica_id: &str,
        beats: &[(i64, Duration)],
        now: Ts,
        beaten: &mut Beaten,
    ) -> Result<()> {
        let mut tx = self.begin_liveness(RUN_HEARTBEAT_HELD.begin).await?;
        let found: sqlx::Result<Vec<(i64, bool)>> = sqlx::query_as(RUN_HEARTBEAT_HELD.sql)
            .bind(replica_id)
            .bind(beat_ids(beats))
            .bind(beat_timeouts(beats))
            .bind(now)
            .fetch_all(&mut *tx)
            .await;
        match found {
            Ok(found) => {
                tx.commit().await?;
                for (id, canceling) in found {
                    if canceling {
                        beaten.canceling.push(id);
                    } else {
                        beaten.owned.push(id);
                    }
                }
            }
            Err(e) if is_lock_timeout(&e) => {
                tx.rollback().await?;
                let mut tx = self.begin_liveness(BEGIN_HEARTBEAT).await?;
                let recorded: Vec<i64> = sqlx::query_scalar(HELD_RUN_HEARTBEAT)
                    .bind(replica_id)
                    .bind(beat_ids(beats))
                    .bind(beat_timeouts(beats))
                    .bind(now)
                    .fetch_all(&mut *tx)
                    .await?;
                tx.commit().await?;
                beaten.held.extend(recorded);
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, None).await
    }

    /// [`PgStore::connect`] for a replica: PostgreSQL aborts any of its
    /// transactions left idle for `idle_in_transaction` (the replica's
    /// `stale_after`).
    ///
    /// A replica cut off by the network between a statement and its
    /// COMMIT leaves its transaction open on the server, holding its row
    /// and advisory locks until the TCP connection dies, which can take
    /// many minutes. Until then the sweeper skips the runs it locked, so
    /// they are never failed and retried, and a promotion lock it held
    /// stops every other replica's rounds. A transaction idle for
    /// `stale_after` belongs to a replica the others already treat as
    /// dead, so nothing live is lost by ending it then; its locks go
    /// when its runs become sweepable.
    pub async fn connect_with(url: &str, idle_in_transaction: Option<Duration>) -> Result<Self> {
        // No JIT compilation on any connection. Baton's statements are
        // short and index-bound, and a table not yet analysed (a fresh
        // database, a burst of runs) makes the planner's costs wrong by
        // orders of magnitude: past PostgreSQL's JIT threshold, a 1 ms
        // statement compiled its plan on every execution first. The
        // replica list (the promoter reads its node labels from it) took
        // 28 ms that way on a fresh database, and a round's reads 26 ms.
        //
        // And this build writes the logs of claims and finishes itself:
        // the trigger that writes them for older builds skips its
        // statements (migrations/postgres/0030_run_logs.sql).
        let mut options: PgConnectOptions = url
            .parse::<PgConnectOptions>()?
            .options([("jit", "off"), ("baton.run_logs", "written")]);
        if let Some(limit) = idle_in_transaction {
            // In milliseconds, PostgreSQL's unit for this setting.
            options = options.options([("idle_in_transaction_session_timeout", millis(limit))]);
        }
        let pool = pool_options(DEFAULT_POOL_SIZE)
            .connect_with(options.clone())
            .await?;
        // Opened at the first heartbeat: the pool above proved the URL.
        let liveness = pool_options(LIVENESS_POOL_SIZE).connect_lazy_with(options);
        Ok(PgStore {
            pool,
            liveness,
            shared: Shared::default(),
        })
    }

    /// A transaction whose `BEGIN` also sets the planner up
    /// ([`BEGIN_INDEX_ONLY`], [`BEGIN_HASH_JOINED`]): one round trip, not
    /// two.
    async fn begin(&self, begin: &'static str) -> Result<Transaction<'static, Postgres>> {
        Ok(self.pool.begin_with(begin).await?)
    }

    /// [`PgStore::begin`] on a connection kept for liveness writes.
    async fn begin_liveness(&self, begin: &'static str) -> Result<Transaction<'static, Postgres>> {
        Ok(self.liveness.begin_with(begin).await?)
    }

    /// `index_only_sql`, and no nested loops either, for the next
    /// statements of `tx`.
    ///
    /// A batch that reaches `task_run` as a joined `UNNEST` (each run with
    /// its own values: a finish's outcome, a heartbeat's timeout, a waiting
    /// cause) must be joined by hashing. Under stale statistics the planner
    /// believes the live-status index is all but empty, puts it on the
    /// outside of a nested loop and rescans the whole batch for every run
    /// in it: the bench's finishes compared 144,102 pairs to store 282
    /// runs. A hash join reads each side once, whatever the estimates.
    /// Callers call [`Self::nested_loops_back`] after that statement when
    /// more follow: their joins look rows up by key, which only a nested
    /// loop does well.
    async fn hash_joined(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
        sqlx::raw_sql(hash_joined_sql!()).execute(&mut **tx).await?;
        Ok(())
    }

    async fn nested_loops_back(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
        sqlx::raw_sql("SET LOCAL enable_nestloop = on")
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Queues a NOTIFY, delivered to every listener when `tx` commits.
    async fn notify(tx: &mut Transaction<'_, Postgres>, signal: Signal) -> Result<()> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(signal.payload())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Keeps new PENDING runs from slipping in under a promotion round that
    /// already read the PENDING set, where the version gate would miss
    /// them: their creators share the lock that a round takes exclusively
    /// (until commit). Only a versioned run can hold another back, so a
    /// submit without versions skips it ([`Store::plan_insert`]); starts
    /// and retries, rare and not worth a look at their tasks, always take
    /// it.
    async fn creation_lock(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
        sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
            .bind(PROMOTER_LOCK)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Runs one of the claim statements in `tx`, its runs stamped as
    /// started at `asked` plus the time since `asked_at`: the claimer's
    /// clock moved on by the wait for the claim lock.
    async fn claim_with(
        tx: &mut Transaction<'_, Postgres>,
        sql: &'static str,
        claim: &Claim<'_>,
        asked: Ts,
        asked_at: Instant,
    ) -> Result<Vec<ClaimRow>> {
        Ok(sqlx::query_as(sql)
            .bind(claim.replica_id)
            .bind(claim.labels)
            .bind(claim.limit)
            .bind(asked.plus(asked_at.elapsed()))
            .bind(millis(claim.heartbeat_timeout))
            .fetch_all(&mut **tx)
            .await?)
    }
}

#[async_trait::async_trait]
impl Dialect for PgStore {
    type Tx = Transaction<'static, Postgres>;

    const BACKEND: Backend = Backend::Postgres;

    // The server's clock as it reads now (not the transaction's start,
    // which `now()` would give).
    const CLOCK: Option<&'static str> = Some("SELECT clock_timestamp()");
    const MIXED_BUILDS: bool = true;

    const FINISHED_PER_MINUTE: &'static str = overview::finished_per_minute_sql!(
        "FLOOR(EXTRACT(EPOCH FROM finished_at) / 60)::BIGINT",
        "SUM(cardinality(runs))::BIGINT",
        "finish_log"
    );

    fn shared(&self) -> &Shared {
        &self.shared
    }

    async fn begin(&self) -> Result<Self::Tx> {
        Ok(self.pool.begin().await?)
    }

    /// The lease waits for a lock no longer than a heartbeat does. The
    /// leader gives a renewal up after a third of the lease, but that
    /// drops only the future: its statement went on waiting for the lock
    /// on its connection. Under an outside lock on the lease's row the
    /// retries so took every liveness connection, the heartbeats found
    /// none, and the replica stopped its own commands
    /// (tests/outside_locks.rs).
    async fn begin_liveness(&self) -> Result<Self::Tx> {
        Ok(self.liveness.begin_with(BEGIN_HEARTBEAT).await?)
    }

    async fn commit(tx: Self::Tx) -> Result<()> {
        Ok(tx.commit().await?)
    }

    async fn execute(tx: &mut Self::Tx, sql: Sql, args: &[Arg<'_>]) -> Result<u64> {
        let (text, keep) = sql.into_parts();
        Ok(sqlx::query_with(text, arguments::<Postgres>(args)?)
            .persistent(keep)
            .execute(&mut **tx)
            .await?
            .rows_affected())
    }

    async fn fetch_all<R: StoreRow>(
        tx: &mut Self::Tx,
        sql: Sql,
        args: &[Arg<'_>],
    ) -> Result<Vec<R>> {
        let (text, keep) = sql.into_parts();
        Ok(sqlx::query_as_with(text, arguments::<Postgres>(args)?)
            .persistent(keep)
            .fetch_all(&mut **tx)
            .await?)
    }

    async fn read<R: StoreRow>(&self, sql: Sql, args: &[Arg<'_>]) -> Result<Vec<R>> {
        let (text, keep) = sql.into_parts();
        Ok(sqlx::query_as_with(text, arguments::<Postgres>(args)?)
            .persistent(keep)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn write(&self, sql: Sql, args: &[Arg<'_>]) -> Result<u64> {
        let (text, keep) = sql.into_parts();
        Ok(sqlx::query_with(text, arguments::<Postgres>(args)?)
            .persistent(keep)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn write_returning<R: StoreRow>(&self, sql: Sql, args: &[Arg<'_>]) -> Result<Vec<R>> {
        self.read(sql, args).await
    }

    async fn heartbeat_write<R: StoreRow>(&self, sql: Sql, args: &[Arg<'_>]) -> Result<Vec<R>> {
        let mut tx = self.begin_liveness(BEGIN_HEARTBEAT).await?;
        let rows = Self::fetch_all(&mut tx, sql, args).await?;
        tx.commit().await?;
        Ok(rows)
    }

    /// The replica's row may be held alone (an outside `SELECT … FOR
    /// UPDATE`): the sweeper skips it, and takes it the moment it is let
    /// go. The beat waits in the row's lock queue, but between one wait
    /// and the next nobody does, so a holder letting go then handed a live
    /// replica's row to a sweep, past its stamp, and all its runs failed.
    /// Recorded here, the beat keeps the replica live for the sweeper
    /// until its next wait. Under a table lock the sweep waits too, and
    /// the record changes nothing.
    async fn held_replica_heartbeat(&self, replica_id: &str, now: Ts) -> Result<()> {
        let mut tx = self.begin_liveness(BEGIN_HEARTBEAT).await?;
        sqlx::query(HELD_REPLICA_HEARTBEAT)
            .bind(replica_id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    fn row_lock(lock: RowLock) -> &'static str {
        match lock {
            RowLock::Tasks => "FOR UPDATE OF t",
            RowLock::SweptRuns => "FOR UPDATE OF r SKIP LOCKED",
            RowLock::TakenDeliveries => "FOR UPDATE SKIP LOCKED",
            RowLock::Schedules => "FOR UPDATE",
            RowLock::DueSchedules => "FOR UPDATE SKIP LOCKED",
        }
    }

    async fn announce(tx: &mut Self::Tx, signal: Signal) -> Result<()> {
        Self::notify(tx, signal).await
    }

    /// SQLSTATE 40P01.
    fn is_deadlock(e: &StoreError) -> bool {
        matches!(e, StoreError::Database(sqlx::Error::Database(db))
            if db.code().as_deref() == Some("40P01"))
    }

    async fn runs_create(
        tx: &mut Self::Tx,
        task_ids: &[i64],
        run_at: &[Option<Ts>],
        actor: Actor<'_>,
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>> {
        Self::creation_lock(tx).await?;
        // Who: plan start, retries (operator and automatic). A submit that
        // starts at once creates its runs in PLAN_SUBMIT.
        let created: Vec<i64> = sqlx::query_scalar(concat!(
            "WITH made AS (
                INSERT INTO task_run (task_id, plan_id, attempt, status, run_at, created_at,
                    waiting_cause, held, dependents, approval_pending, ",
            run_copies_of_task!(""),
            ")
                SELECT t.id, t.plan_id, COALESCE(prev.attempt, 0) + 1, 'PENDING',
                    COALESCE(x.run_at, t.run_at), $3, $4, t.deps_open > 0, t.has_dependents,
                    t.approval IS NOT NULL AND t.approved_at IS NULL, ",
            run_copies_of_task!("t."),
            "
                FROM UNNEST($1::bigint[], $2::timestamptz[]) AS x(task_id, run_at)
                JOIN task t ON t.id = x.task_id
                LEFT JOIN task_run prev ON prev.id = t.latest_run_id
                RETURNING id, task_id),
            linked AS (
                UPDATE task SET latest_run_id = made.id FROM made WHERE task.id = made.task_id)
            INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
            SELECT id, NULL, 'PENDING', $5, $3, $6 FROM made
            RETURNING run_id"
        ))
        .bind(task_ids)
        .bind(run_at)
        .bind(now)
        .bind(domain::gates::CAUSE_NEW)
        .bind(actor)
        .bind(detail)
        .fetch_all(&mut **tx)
        .await?;
        Ok(created)
    }

    async fn runs_cancel(
        tx: &mut Self::Tx,
        run_ids: &[i64],
        actor: Actor<'_>,
        now: Ts,
    ) -> Result<u64> {
        // Who: operator cancel of a task or a plan. A run not yet executing
        // ends CANCELED here; a RUNNING one is only asked to stop: it keeps
        // its status (and its target, slot and version) until its replica
        // confirms the kill in its finish, or the sweeper finds that
        // replica stale. The replica hears it by NOTIFY or its next beat.
        let (changed, moved): (i64, Vec<i64>) = sqlx::query_as(concat!(
            "WITH old AS (
                SELECT id, status FROM task_run
                WHERE id = ANY($1) AND status IN ('PENDING', 'AVAILABLE', 'RUNNING')
                ORDER BY id FOR UPDATE),
            moved AS (
                UPDATE task_run r SET status = 'CANCELED', finished_at = $2, waiting_cause = NULL,
                    error = 'canceled by ' || $3
                FROM old WHERE r.id = old.id AND old.status <> 'RUNNING'
                RETURNING r.id, r.status, old.status AS from_status, r.replica_id),
            ",
            finish_logged_sql!("moved", "$2"),
            ",
            asked AS (
                UPDATE task_run r SET cancel_requested_by = $3, cancel_requested_at = $2
                FROM old WHERE r.id = old.id AND old.status = 'RUNNING'
                    AND r.cancel_requested_by IS NULL
                RETURNING r.id),
            logged AS (
                INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
                SELECT id, from_status, 'CANCELED', replica_id, $3, $2, 'canceled by ' || $3
                FROM moved)
            SELECT (SELECT COUNT(*) FROM moved) + (SELECT COUNT(*) FROM asked),
                ARRAY(SELECT id FROM moved)",
        ))
        .bind(run_ids)
        .bind(now)
        .bind(actor)
        .fetch_one(&mut **tx)
        .await?;
        // The ended runs' queue rows, in a statement of its own. A run that
        // a round promoted while this cancel waited for its row lock is
        // seen AVAILABLE above (the lock re-reads the row), but the queue
        // row that round inserted is not: it committed after that
        // statement's snapshot. This statement's snapshot comes after it.
        if !moved.is_empty() {
            sqlx::query("DELETE FROM available_run WHERE run_id = ANY($1)")
                .bind(&moved)
                .execute(&mut **tx)
                .await?;
        }
        Ok(changed as u64)
    }

    async fn listen(&self) -> Result<()> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(CHANNEL).await?;
        // Heard from here on. What was announced before (while this
        // replica started, or while the connection was down) passed it
        // by: wake every loop once to look, rather than leave it to the
        // next poll. A bench's first pickup waited that poll (1 s) when
        // its submit came before the leader's LISTEN.
        let signals = self.shared.signals();
        for signal in Signal::ALL {
            signals.raise(signal);
        }
        loop {
            let note = listener.recv().await?;
            if let Some(signal) = Signal::from_payload(note.payload()) {
                self.shared.signals().raise(signal);
            }
        }
    }

    fn migrator(&self) -> &'static Migrator {
        &MIGRATOR
    }

    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn round_begin(&self) -> Result<Self::Tx> {
        self.begin(ROUND_BEGIN).await
    }

    const PENDING_RUNS: &'static str =
        gates::pending_runs_sql!(holds_lock_sql!("baton.round_locked"));

    async fn round_reads(tx: &mut Self::Tx) -> Result<Option<(Vec<PendingRun>, Vec<ContextRow>)>> {
        let rows: Vec<RoundRow> = sqlx::query_as(ROUND_READS).fetch_all(&mut **tx).await?;
        let mut pending = Vec::with_capacity(rows.len());
        let mut context = Vec::new();
        for row in rows {
            match row {
                RoundRow::Run(run) => pending.push(run),
                RoundRow::Context(row) => context.push(row),
                RoundRow::Busy => return Ok(None),
            }
        }
        Ok(Some((pending, context)))
    }

    async fn promoter_lock_wait(tx: &mut Self::Tx, limit: Duration) -> Result<()> {
        // A waiting request queues ahead of later try-locks, so promoters
        // racing for the lock cannot starve it.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SET LOCAL lock_timeout = '{}ms'",
            limit.as_millis()
        )))
        .execute(&mut **tx)
        .await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PROMOTER_LOCK)
            .execute(&mut **tx)
            .await
            .map_err(|e| match is_lock_timeout(&e) {
                true => StoreError::Conflict(format!(
                    "a promotion round held its lock for {} s; try again",
                    limit.as_secs()
                )),
                false => e.into(),
            })?;
        sqlx::query("SET LOCAL lock_timeout = DEFAULT")
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn round_write(tx: &mut Self::Tx, decided: &Decisions, now: Ts) -> Result<usize> {
        // A round's transaction is index-only from its BEGIN (ROUND_BEGIN);
        // unpins and waiting causes join arrays to task_run.
        if !decided.unpin.is_empty() || !decided.causes.is_empty() {
            Self::hash_joined(tx).await?;
        }
        if !decided.unpin.is_empty() {
            let (ids, details): (Vec<i64>, Vec<String>) = decided.unpin.iter().cloned().unzip();
            sqlx::query(
                "WITH unpinned AS (
                    UPDATE task_run r SET node = NULL FROM UNNEST($1::bigint[], $2::text[]) AS u(id, detail)
                    WHERE r.id = u.id AND r.status = 'PENDING' RETURNING r.id, u.detail)
                INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
                SELECT id, 'PENDING', 'PENDING', $3, $4, detail FROM unpinned",
            )
            .bind(ids)
            .bind(details)
            .bind(SCHEDULER)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        }
        let promoted = if decided.promote.is_empty() {
            0
        } else {
            let n: i64 = sqlx::query_scalar(PROMOTE.sql)
                .bind(&decided.promote)
                .bind(now)
                .bind(CHANNEL)
                .bind(Signal::Available.payload())
                .fetch_one(&mut **tx)
                .await?;
            n as usize
        };
        if !decided.causes.is_empty() {
            let (ids, causes): (Vec<i64>, Vec<String>) = decided.causes.iter().cloned().unzip();
            sqlx::query(
                "UPDATE task_run r SET waiting_cause = c.cause
                 FROM UNNEST($1::bigint[], $2::text[]) AS c(id, cause)
                 WHERE r.id = c.id AND r.status = 'PENDING'",
            )
            .bind(ids)
            .bind(causes)
            .execute(&mut **tx)
            .await?;
        }
        Ok(promoted)
    }

    async fn round_claim(
        tx: &mut Self::Tx,
        ids: &[i64],
        claim: &Claim<'_>,
        now: Ts,
        started: Ts,
    ) -> Result<Vec<ClaimRow>> {
        Ok(sqlx::query_as(ROUND_CLAIM.sql)
            .bind(claim.replica_id)
            .bind(ids)
            .bind(now)
            .bind(started)
            .bind(millis(claim.heartbeat_timeout))
            .fetch_all(&mut **tx)
            .await?)
    }

    async fn runs_claim(&self, claim: &Claim<'_>, asked: Ts) -> Result<Vec<ClaimRow>> {
        let asked_at = Instant::now();
        if self.shared.older_builds() {
            let mut tx = self.begin(CLAIM_MIXED.begin).await?;
            let rows = Self::claim_with(&mut tx, CLAIM_MIXED.sql, claim, asked, asked_at).await?;
            tx.commit().await?;
            return Ok(rows);
        }
        let mut tx = self.begin(CLAIM_TRIED.begin).await?;
        // Stamped once the claim lock is held: here, if the BEGIN took it.
        let rows = Self::claim_with(&mut tx, CLAIM_TRIED.sql, claim, asked, asked_at).await?;
        if !rows.is_empty() {
            tx.commit().await?;
            return Ok(rows);
        }
        // Nothing AVAILABLE, or another claimer held the lock: wait for
        // it and look again, in the same transaction.
        let sql = match sqlx::raw_sql(CLAIM_LOCK).execute(&mut *tx).await {
            Ok(_) => CLAIM.sql,
            Err(e) if is_lock_timeout(&e) => {
                tracing::warn!(
                    "the claim lock was held for over {}; claiming around its holder",
                    claim_lock_timeout!()
                );
                drop(tx);
                tx = self.begin(CLAIM_AROUND.begin).await?;
                CLAIM_AROUND.sql
            }
            Err(e) => return Err(e.into()),
        };
        let rows = Self::claim_with(&mut tx, sql, claim, asked, asked_at).await?;
        tx.commit().await?;
        Ok(rows)
    }

    async fn runs_finish(
        &self,
        replica_id: &str,
        finishes: &[Finish],
        now: Ts,
    ) -> Result<(Self::Tx, Vec<FinishedRow>)> {
        let mut tx = self.begin(FINISH.begin).await?;
        let done: Vec<FinishedRow> = sqlx::query_as(FINISH.sql)
            .bind(replica_id)
            .bind(finishes.iter().map(|f| f.run_id).collect::<Vec<_>>())
            .bind(
                finishes
                    .iter()
                    .map(|f| f.status.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(finishes.iter().map(|f| f.result_code).collect::<Vec<_>>())
            .bind(finishes.iter().map(|f| f.error.clone()).collect::<Vec<_>>())
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
        Self::nested_loops_back(&mut tx).await?;
        Ok((tx, done))
    }

    async fn runs_heartbeat(
        &self,
        replica_id: &str,
        beats: &[(i64, Duration)],
        now: Ts,
    ) -> Result<Beaten> {
        let mut tx = self.begin_liveness(RUN_HEARTBEAT.begin).await?;
        let found: Vec<(i64, bool, bool)> = sqlx::query_as(RUN_HEARTBEAT.sql)
            .bind(replica_id)
            .bind(beat_ids(beats))
            .bind(beat_timeouts(beats))
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let mut beaten = Beaten::default();
        let mut busy = Vec::new();
        for (id, owned, canceling) in found {
            match (owned, canceling) {
                (true, true) => beaten.canceling.push(id),
                (true, false) => beaten.owned.push(id),
                (false, _) => busy.push(id),
            }
        }
        if !busy.is_empty() {
            let held: Vec<(i64, Duration)> = beats
                .iter()
                .filter(|(id, _)| busy.contains(id))
                .copied()
                .collect();
            self.held_runs_heartbeat(replica_id, &held, now, &mut beaten)
                .await?;
        }
        Ok(beaten)
    }

    async fn log_append(&self, replica_id: &str, run_id: i64, lines: &[LogLine]) -> Result<bool> {
        // Who: executors capturing output. FOR SHARE waits for a concurrent
        // cancel to commit and then sees it, so no line lands after one.
        let owned: Option<i64> = sqlx::query_scalar(
            "WITH owned AS (
                SELECT id FROM task_run WHERE id = $2 AND status = 'RUNNING' AND replica_id = $1
                FOR SHARE),
            written AS (
                INSERT INTO run_log (run_id, at, stream, line)
                SELECT owned.id, x.at, x.stream, x.line FROM owned,
                    UNNEST($3::timestamptz[], $4::text[], $5::text[]) AS x(at, stream, line))
            SELECT id FROM owned",
        )
        .bind(replica_id)
        .bind(run_id)
        .bind(lines.iter().map(|l| l.at).collect::<Vec<_>>())
        .bind(lines.iter().map(|l| l.stream).collect::<Vec<_>>())
        .bind(lines.iter().map(|l| l.line.clone()).collect::<Vec<_>>())
        .fetch_optional(&self.pool)
        .await?;
        Ok(owned.is_some())
    }

    async fn sweep_begin(&self) -> Result<Self::Tx> {
        let mut tx = self.begin(BEGIN_INDEX_ONLY).await?;
        sqlx::raw_sql(SWEEP_LOCKS).execute(&mut *tx).await?;
        Ok(tx)
    }

    const SWEEP_CANDIDATES: &'static str = liveness::sweep_candidates_sql!(
        "WITH stale AS (SELECT replica_id FROM replica WHERE last_heartbeat < $1
            FOR NO KEY UPDATE SKIP LOCKED) ",
        "p.replica_id IN (SELECT replica_id FROM stale)"
    );

    async fn runs_fail(
        tx: &mut Self::Tx,
        found: &[SweepCandidate],
        causes: &[String],
        now: Ts,
    ) -> Result<Vec<FinishedRow>> {
        // Who: the leader's sweeper. Conditional on the run still being
        // RUNNING on the replica it was seen on.
        Self::hash_joined(tx).await?;
        let done: Vec<FinishedRow> = sqlx::query_as(
            concat!(
                "WITH f AS (
                SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[]) AS f(id, replica, cause)),
            done AS (
                UPDATE task_run r SET status = ",
                rows::cancel_status_sql!("'FAILED'", "r"),
                ", finished_at = $4, error = ",
                rows::cancel_error_sql!("'FAILED'", "r", "f.cause", "'; ' || f.cause"),
                "
                FROM f WHERE r.id = f.id AND r.status = 'RUNNING'
                    AND r.replica_id IS NOT DISTINCT FROM f.replica
                RETURNING r.id, r.plan_id, r.status, r.task_id, r.attempt, r.max_attempts,
                    r.dependents, r.replica_id, r.error, r.cancel_requested_by),
            ",
                finish_logged_sql!("done", "$4"),
                ",
            logged AS (
                INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
                SELECT id, 'RUNNING', status, replica_id,
                    CASE WHEN status = 'CANCELED' THEN cancel_requested_by ELSE $5 END, $4, error
                FROM done)
            SELECT id, plan_id, status, task_id, attempt, max_attempts, dependents FROM done"
            ),
        )
        .bind(found.iter().map(|c| c.id).collect::<Vec<_>>())
        .bind(found.iter().map(|c| c.replica_id.clone()).collect::<Vec<_>>())
        .bind(causes)
        .bind(now)
        .bind(SCHEDULER)
        .fetch_all(&mut **tx)
        .await?;
        Self::nested_loops_back(tx).await?;
        Ok(done)
    }

    async fn claim_log_compact(tx: &mut Self::Tx) -> Result<u64> {
        // A claim's row is written in its transaction, so a row whose runs
        // are RUNNING is never deleted; one committed later is not seen.
        let gone = sqlx::query(
            "DELETE FROM claim_log c WHERE NOT EXISTS (
                SELECT 1 FROM task_run r WHERE r.id = ANY(c.runs) AND r.status = 'RUNNING')",
        )
        .execute(&mut **tx)
        .await?;
        Ok(gone.rows_affected())
    }

    async fn finishes_logged(tx: &mut Self::Tx, at: Ts, ended: &[FinishedRow]) -> Result<()> {
        sqlx::query(
            "INSERT INTO finish_log (finished_at, status, runs)
            SELECT $1, status, array_agg(id ORDER BY id)
            FROM UNNEST($2::bigint[], $3::text[]) AS e(id, status) GROUP BY status",
        )
        .bind(at)
        .bind(ended.iter().map(|e| e.id).collect::<Vec<_>>())
        .bind(ended.iter().map(|e| e.status.as_str()).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn finishes_forgotten(tx: &mut Self::Tx, run_ids: &[i64]) -> Result<()> {
        // Found through the log's index by the runs' end times; a row left
        // with no run goes.
        let emptied: Vec<Option<i64>> = sqlx::query_scalar(
            "UPDATE finish_log l SET runs = ARRAY(SELECT x FROM unnest(l.runs) x WHERE x <> ALL($1))
            WHERE l.finished_at IN (SELECT finished_at FROM task_run
                    WHERE id = ANY($1) AND finished_at IS NOT NULL)
                AND l.runs && $1
            RETURNING CASE WHEN cardinality(l.runs) = 0 THEN l.id END",
        )
        .bind(run_ids)
        .fetch_all(&mut **tx)
        .await?;
        sqlx::query("DELETE FROM finish_log WHERE id = ANY($1)")
            .bind(emptied.into_iter().flatten().collect::<Vec<i64>>())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn runs_hand_back(
        tx: &mut Self::Tx,
        replica_id: &str,
        run_ids: &[i64],
        detail: &str,
        now: Ts,
    ) -> Result<Vec<i64>> {
        // Who: a replica shutting down. The run keeps its attempt and the
        // target and plan slot it holds; any replica may claim it again.
        // The claim being undone was stamped on the row, which the next
        // claim stamps again: it becomes an event row first, under the
        // number it was stamped with, so the history keeps its place.
        let back: Vec<i64> = sqlx::query_scalar(
            "WITH old AS (
                SELECT id, started_at, claimed_seq FROM task_run
                WHERE id = ANY($2) AND status = 'RUNNING' AND replica_id = $1
                    AND cancel_requested_by IS NULL
                FOR UPDATE),
            back AS (
                UPDATE task_run r SET status = 'AVAILABLE', replica_id = NULL, started_at = NULL,
                    last_heartbeat_at = NULL, heartbeat_deadline = NULL, deadline = NULL,
                    claimed_seq = NULL
                FROM old WHERE r.id = old.id AND r.status = 'RUNNING'
                RETURNING r.id, r.node, old.started_at, old.claimed_seq),
            queued AS (
                INSERT INTO available_run (run_id, node) SELECT id, node FROM back),
            claim_kept AS (
                INSERT INTO run_event (id, run_id, from_status, to_status, replica_id, actor, at)
                SELECT claimed_seq, id, 'AVAILABLE', 'RUNNING', $1, $1, started_at FROM back
                WHERE claimed_seq IS NOT NULL)
            INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
            SELECT id, 'RUNNING', 'AVAILABLE', $1, $1, $3, $4 FROM back RETURNING run_id",
        )
        .bind(replica_id)
        .bind(run_ids)
        .bind(now)
        .bind(detail)
        .fetch_all(&mut **tx)
        .await?;
        Ok(back)
    }

    async fn plan_write(
        tx: &mut Self::Tx,
        plan: &NewPlan,
        actor: Actor<'_>,
        admit: Admit,
        now: Ts,
    ) -> Result<(i64, Made)> {
        if plan.starts_versioned_runs() {
            Self::creation_lock(tx).await?;
        }
        if admit == Admit::IfClear && plan.admits_runs() {
            sqlx::raw_sql(ADMIT_LOCK_TRY).execute(&mut **tx).await?;
        }
        submit::plan_write(tx, plan, actor, None, admit, now).await
    }

    async fn plan_submit_alone(
        &self,
        plan: &NewPlan,
        asked: &Asked<'_>,
        detail: &str,
        now: Ts,
    ) -> Result<Option<(i64, Made)>> {
        if plan.starts_versioned_runs() {
            // The creation lock is a transaction's (`creation_lock`).
            return Ok(None);
        }
        let audit = submit::Audit { asked, detail };
        let by = asked.by.name;
        if plan.admits_runs() {
            // Four round trips where the statement alone takes one, for a
            // second write of every admitted run's row saved.
            let mut tx = self.begin(BEGIN_INDEX_ONLY).await?;
            match sqlx::raw_sql(ADMIT_LOCK_WAIT).execute(&mut *tx).await {
                Ok(_) => {
                    let written =
                        submit::plan_write(&mut tx, plan, by, Some(&audit), Admit::IfClear, now)
                            .await?;
                    tx.commit().await?;
                    return Ok(Some(written));
                }
                Err(e) if is_lock_timeout(&e) => drop(tx),
                Err(e) => return Err(e.into()),
            }
        }
        let mut conn = self.pool.acquire().await?;
        let written =
            submit::plan_write(&mut conn, plan, by, Some(&audit), Admit::Never, now).await?;
        Ok(Some(written))
    }
}

mod submit;

#[cfg(test)]
mod plan_tests;

#[cfg(test)]
mod lock_tests;

#[cfg(test)]
mod pool_tests;

#[cfg(test)]
mod storage_tests;

#[cfg(test)]
mod queue_repair_tests;
#[cfg(test)]
mod run_log_tests;
