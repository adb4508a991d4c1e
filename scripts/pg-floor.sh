#!/usr/bin/env bash
# What the rows Baton must write cost PostgreSQL, with nothing else around
# them: the floor under `baton bench` on PostgreSQL.
#
#   scripts/pg-floor.sh [--runs N] [--rounds K] [--batch B]
#
# Baton makes every status change one conditional UPDATE and records it
# (docs/design.md, "Status model"). A run of a plan is therefore written
# as: its task and its run (created, "submitted"), then three UPDATEs of
# the run (AVAILABLE, RUNNING, DONE). Each of those four transitions is
# recorded as Baton records it on PostgreSQL, a stamp on the run's row
# (a number from run_event's sequence, and the promotion's time), or as
# Baton recorded it before b08f399, an event row each. This script applies migrations/postgres/ to a scratch database
# and makes those writes for N runs with Baton's statements, cut down to
# the writes themselves (no outcomes per run, no NOTIFY, no audit), in the
# largest batches (one statement per phase for the submit loop and the
# promotion, B runs per claim and finish), from one backend, with
# `synchronous_commit = off`: no gates judged, no client work, no waiting
# for the disk, no other session. Each phase is one transaction on one
# backend, so its time is that backend's CPU time, near enough.
#
# Six variants, each in every round:
#   events    the event rows, with the indexes of RUNNING runs and of runs
#             by end time that migration 0030 replaced (as before b08f399)
#   indexes   the stamps, with those two indexes (as before 0030)
#   logs      the stamps, and a row of claim_log per claim statement and of
#             finish_log per finish statement (as now: no index of
#             task_run names a column a claim or finish changes, so both
#             can be HOT updates, with no new index entry)
#   fused     as "logs", with every run's promotion and claim one write
#             (the claim takes PENDING runs, as a round's claim for its own
#             replica does; the promote phase then writes nothing)
#   bare      neither stamps nor logs nor those indexes, to show their share
#   claimlog  a claim that writes no row of task_run: it takes the runs'
#             queue rows, reads what their executions need and writes one
#             row of claim_log naming its replica and start (one number
#             drawn per statement); the finish then writes the run's row
#             once, with the claim's stamps and its own, fenced by the
#             run being AVAILABLE and out of the queue. Not Baton's
#             storage: the floor of a redesign in which RUNNING would be
#             read through the claim log (docs/benchmarks.md)
# Every variant but the fused one queues promoted runs in `available_run`
# and claims from it, as Baton does. It prints the share of HOT updates.
#
# Finishes take the runs in id order by the primary key, as a replica's
# finish looks its batch up by id.
#
# It prints, per phase, the median over K rounds of the time and of the
# time per run, and the floor for the bench's two throughput phases:
#   full queue   promote + claim + finish (the runs were submitted
#                before the clock started)
#   end to end   all four
# On a machine with C cores, C / floor is the most runs per second the
# database could write if it did nothing else and every core were busy.
#
# PostgreSQL: BATON_FLOOR_DATABASE_URL (a server's `postgres` database),
# else the server on 127.0.0.1:5432, else a throw-away cluster (as
# scripts/test.sh). Needs psql.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$BATON_ROOT"

runs=20000
rounds=3
batch=2000
while (($#)); do
    case $1 in
        --runs) runs=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --batch) batch=$2; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer, not '$runs'"
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, not '$rounds'"
[[ $batch =~ ^[1-9][0-9]*$ ]] || die "--batch must be a positive integer, not '$batch'"
((runs % 1000 == 0)) || die "--runs must be a multiple of 1000 (plans of 1,000 tasks), not $runs"

trap stop_postgres EXIT
ensure_postgres BATON_FLOOR_DATABASE_URL
PSQL=$(command -v psql || true)
[[ -n $PSQL ]] || PSQL="$(find_pg_bin)/psql"
DB=baton_floor_$$
DB_URL="${PG_URL%/*}/$DB"

# One phase per `\echo phase NAME` line; psql's \timing prints the time
# of the statement after it.
model() {
    local events=$1 stamps=$2 fused=$3 logs=$4 claimlog=${5:-FALSE}
    # A stamp's number, or NULL (a CASE that is never true draws none).
    local seq="CASE WHEN $stamps THEN nextval('run_event_id_seq') END"
    # Fused: the claim takes PENDING runs, promotion and claim in one
    # write, as a round's claim for its own replica does.
    local claimable="status = 'AVAILABLE'" promotion=""
    if [[ $fused == TRUE ]]; then
        claimable="status = 'PENDING' AND held = FALSE"
        promotion=" waiting_cause = NULL, available_at = now(), available_seq = $seq,"
    fi
    # Where a claim picks its runs: the queue of AVAILABLE runs, whose
    # rows it takes after their runs' (as Baton's claim), or (fused) the
    # partial index of PENDING runs.
    local picked="SELECT run_id FROM available_run WHERE node IS NULL ORDER BY run_id LIMIT $batch"
    local dequeue=", dequeued AS (DELETE FROM available_run
        WHERE run_id = ANY(ARRAY(SELECT id FROM claimed)))"
    if [[ $fused == TRUE ]]; then
        picked="SELECT id FROM task_run WHERE $claimable AND node IS NULL ORDER BY id LIMIT $batch"
        dequeue=""
    fi
    # The logs' rows, as Baton's claim and finish statements write them.
    local claim_logged="" finish_logged=""
    if [[ $logs == TRUE ]]; then
        claim_logged=", claim_logged AS (INSERT INTO claim_log (runs)
            SELECT array_agg(id ORDER BY id) FROM claimed HAVING COUNT(*) > 0)"
        finish_logged=", finish_logged AS (INSERT INTO finish_log (finished_at, status, runs)
            SELECT now(), status, array_agg(id ORDER BY id) FROM done GROUP BY status)"
    fi
    # The claim and the finish: as Baton's, or (claimlog) the claim
    # writing only the queue and the log, the finish the run's row.
    local claim="WITH claimed AS (
        UPDATE task_run r SET status = 'RUNNING', replica_id = 'r-floor', started_at = now(),
            last_heartbeat_at = now(), deadline = now() + r.timeout_ms * INTERVAL '1 millisecond',
            heartbeat_deadline = now() + INTERVAL '30 seconds',$promotion claimed_seq = $seq
        FROM task t
        WHERE r.id = ANY(ARRAY($picked))
            AND r.$claimable AND t.id = r.task_id
        RETURNING r.id, t.executor),
    logged AS (
        INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at)
        SELECT id, 'AVAILABLE', 'RUNNING', 'r-floor', 'r-floor', now() FROM claimed
        WHERE $events)$dequeue$claim_logged"
    local ended="UPDATE task_run r SET status = 'DONE', finished_at = now(), result_code = 0,
            ended_seq = $seq
        WHERE r.id = ANY(ARRAY(SELECT id FROM batch))
            AND r.status = 'RUNNING' AND r.replica_id = 'r-floor'"
    local prepare=""
    if [[ $claimlog == TRUE ]]; then
        prepare="ALTER TABLE claim_log ADD COLUMN replica_id TEXT, ADD COLUMN started_at TIMESTAMPTZ,
    ADD COLUMN first_seq BIGINT;"
        claim="WITH picked AS (
        DELETE FROM available_run WHERE run_id = ANY(ARRAY($picked)) RETURNING run_id),
    claimed AS (
        SELECT r.id, t.executor FROM task_run r JOIN task t ON t.id = r.task_id
        WHERE r.id = ANY(ARRAY(SELECT run_id FROM picked)) AND r.status = 'AVAILABLE'),
    claim_logged AS (
        INSERT INTO claim_log (runs, replica_id, started_at, first_seq)
        SELECT array_agg(id ORDER BY id), 'r-floor', now(), nextval('run_event_id_seq')
        FROM claimed HAVING COUNT(*) > 0)"
        ended="UPDATE task_run r SET status = 'DONE', replica_id = 'r-floor', started_at = now(),
            last_heartbeat_at = now(), deadline = now() + r.timeout_ms * INTERVAL '1 millisecond',
            finished_at = now(), result_code = 0, claimed_seq = $seq, ended_seq = $seq
        WHERE r.id = ANY(ARRAY(SELECT id FROM batch)) AND r.status = 'AVAILABLE'
            AND NOT EXISTS (SELECT FROM available_run q WHERE q.run_id = r.id)"
    fi
    cat <<SQL
\set ON_ERROR_STOP on
SET synchronous_commit = off;
SET jit = off;
$prepare
\timing on
\echo phase submit
DO \$\$
BEGIN
  FOR i IN 1..$((runs / 1000)) LOOP
    WITH p AS (
        INSERT INTO plan (name, description, created_at, created_by, webhooks, open_tasks)
        VALUES ('floor-' || i, '', now(), 'floor', '[]', 1000) RETURNING id),
    t AS (
        INSERT INTO task (plan_id, name, target, exclusive, timeout_ms, max_attempts, executor,
            latest_run_id)
        SELECT p.id, 't' || g, 'target-' || (g % 200), FALSE, 60000, 1,
            '{"kind":"sleep","ms":0}', nextval('task_run_id_seq')
        FROM p, generate_series(1, 1000) g ORDER BY g
        RETURNING id, plan_id, target, exclusive, version, run_at, node, timeout_ms,
            max_attempts, reassign_after_ms, latest_run_id),
    made AS (
        INSERT INTO task_run (id, task_id, plan_id, attempt, status, target, exclusive, version,
            node, timeout_ms, max_attempts, run_at, created_at, waiting_cause, reassign_after_ms,
            created_seq)
        SELECT latest_run_id, id, plan_id, 1, 'PENDING', target, exclusive, version, node,
            timeout_ms, max_attempts, run_at, now(), 'new', reassign_after_ms, $seq FROM t
        RETURNING id)
    INSERT INTO run_event (run_id, from_status, to_status, actor, at, detail)
    SELECT id, NULL, 'PENDING', 'floor', now(), 'submitted' FROM made WHERE $events;
  END LOOP;
END \$\$;
\echo phase promote
WITH moved AS (
    UPDATE task_run SET status = 'AVAILABLE', waiting_cause = NULL,
        available_at = CASE WHEN $stamps THEN now() END, available_seq = $seq
    WHERE id = ANY(ARRAY(SELECT id FROM task_run WHERE status = 'PENDING' AND held = FALSE
            AND NOT $fused))
        AND status = 'PENDING' AND held = FALSE
    RETURNING id, node),
logged AS (
    INSERT INTO run_event (run_id, from_status, to_status, actor, at)
    SELECT id, 'PENDING', 'AVAILABLE', 'scheduler', now() FROM moved WHERE $events),
queued AS (INSERT INTO available_run (run_id, node) SELECT id, node FROM moved)
SELECT count(*) FROM moved;
\echo phase claim
DO \$\$
DECLARE n bigint;
BEGIN
  LOOP
    $claim
    SELECT count(*) FROM claimed INTO n;
    EXIT WHEN n = 0;
  END LOOP;
END \$\$;
\echo phase finish
DO \$\$
DECLARE n bigint; last bigint := 0;
BEGIN
  LOOP
    WITH batch AS (
        SELECT id FROM task_run WHERE id > last ORDER BY id LIMIT $batch),
    done AS (
        $ended
        RETURNING r.id, r.status, r.error),
    logged AS (
        INSERT INTO run_event (run_id, from_status, to_status, replica_id, actor, at, detail)
        SELECT id, 'RUNNING', status, 'r-floor', 'r-floor', now(), error FROM done
        WHERE $events)$finish_logged
    SELECT count(*), max(batch.id) FROM batch INTO n, last;
    EXIT WHEN n = 0;
  END LOOP;
END \$\$;
\timing off
\echo check
SELECT count(*) FILTER (WHERE status = 'DONE'), (SELECT count(*) FROM run_event),
    count(created_seq) + count(available_seq) + count(claimed_seq) + count(ended_seq)
FROM task_run;
SQL
}

# The indexes of task_run, named for the status a claim and a finish
# change, that migration 0030 replaced with the logs.
BEFORE_LOGS="CREATE INDEX task_run_running ON task_run (id) WHERE status = 'RUNNING';
    CREATE INDEX task_run_finished ON task_run (finished_at, status) WHERE finished_at IS NOT NULL"

# A scratch database with Baton's schema; with "indexes", as before 0030.
fresh_database() {
    local indexes=$1
    "$PSQL" "$PG_URL" -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
        -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
    local file
    for file in migrations/postgres/*.sql; do
        "$PSQL" "$DB_URL" -q -v ON_ERROR_STOP=1 -f "$file" >/dev/null
    done
    if [[ $indexes == TRUE ]]; then
        "$PSQL" "$DB_URL" -q -v ON_ERROR_STOP=1 -c "$BEFORE_LOGS"
    fi
    "$PSQL" "$DB_URL" -q -c CHECKPOINT
}

# Prints "phase milliseconds" lines for one run of the model; checks that
# every run ended DONE with the expected numbers of event rows and stamps.
measure() {
    local events=$1 stamps=$2 fused=$3 expected=$4 indexes=$5 logs=$6 claimlog=${7:-FALSE} out
    fresh_database "$indexes"
    out=$(model "$events" "$stamps" "$fused" "$logs" "$claimlog" | "$PSQL" "$DB_URL" -q -X -A -t 2>&1) ||
        die "the model failed: $out"
    local check
    check=$(tail -n1 <<<"$out")
    [[ $check == "$runs|$expected" ]] ||
        die "expected $runs runs DONE and event rows|stamps $expected, found '$check'"
    awk '/^phase / { phase = $2 } /^Time: / && phase { print phase, $2; phase = "" }' <<<"$out"
    # The psql session has ended, so its counts are flushed: HOT updates
    # of task_run in tenths of a percent of its updates.
    "$PSQL" "$DB_URL" -q -X -A -t -c "SELECT 'hot', COALESCE(1000 * n_tup_hot_upd / NULLIF(n_tup_upd, 0), 0)
        FROM pg_stat_user_tables WHERE relname = 'task_run'" | tr '|' ' '
}

results=$(mktemp)
step "Writing $runs runs, $rounds round(s), claims and finishes of $batch, into a scratch database"
# One variant's run: its name, then measure's arguments.
variant() {
    local name=$1
    shift
    measure "$@" | sed "s/^/$name /" >>"$results"
}
stamped="0|$((runs * 4))"
variants=(
    "events TRUE FALSE FALSE $((runs * 4))|0 TRUE FALSE"
    "indexes FALSE TRUE FALSE $stamped TRUE FALSE"
    "logs FALSE TRUE FALSE $stamped FALSE TRUE"
    "fused FALSE TRUE TRUE $stamped FALSE TRUE"
    "bare FALSE FALSE FALSE 0|0 FALSE FALSE"
    "claimlog FALSE TRUE FALSE $stamped FALSE TRUE TRUE"
)
# Every other round in the reverse order, so that a slow stretch of a
# shared machine falls on each variant alike.
for ((round = 1; round <= rounds; round++)); do
    for ((i = 0; i < ${#variants[@]}; i++)); do
        if ((round % 2)); then j=$i; else j=$((${#variants[@]} - 1 - i)); fi
        # shellcheck disable=SC2086 # the fields are words by design
        variant ${variants[j]}
    done
done
"$PSQL" "$PG_URL" -q -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB"

python3 - "$results" "$runs" "$rounds" <<'PY'
import statistics, sys
path, runs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
times = {}
for line in open(path):
    variant, phase, value = line.split()
    times.setdefault((variant, phase), []).append(float(value))
phases = ["submit", "promote", "claim", "finish"]
variants = ["events", "indexes", "logs", "fused", "bare", "claimlog"]
med = {k: statistics.median(v) for k, v in times.items()}
print(f"\nmedians of {rounds} round(s) of {runs} runs, one backend, "
      "synchronous_commit off")
print(f"{'phase':<28}{'event rows':>24}{'stamps, indexes':>24}"
      f"{'stamps, logs (now)':>24}{'logs, fused':>24}{'neither':>24}"
      f"{'claim log only':>24}")
def row(name, keys):
    cells = []
    for variant in variants:
        ms = sum(med[(variant, k)] for k in keys)
        cells.append(f"{ms:8.1f} ms {ms * 1000 / runs:6.2f} µs/run")
    print(f"{name:<28}" + "".join(f"{c:>24}" for c in cells))
for phase in phases:
    row(phase, [phase])
row("floor, full queue", ["promote", "claim", "finish"])
row("floor, end to end", phases)
print(f"{'HOT updates of task_run':<28}" + "".join(
    f"{med[(v, 'hot')] / 10:>23.1f}%" for v in variants))
PY
rm -f "$results"
