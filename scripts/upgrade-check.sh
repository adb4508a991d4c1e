#!/usr/bin/env bash
# Rolling upgrade across a database migration, on PostgreSQL: two replicas
# of an OLD build serve a steady load of plans; a replica of the NEW build
# starts beside them and applies the new migrations while they serve; the
# old ones are then stopped one at a time (the first with SIGTERM, the
# second with SIGKILL, as a crash mid-upgrade) and a second new replica
# starts. Then it checks that no run was lost, duplicated or stranded, and
# that the old replicas kept working against the newer schema, which is
# the rule docs/deploy.md ("Rolling upgrade") states for migrations.
#
#   scripts/upgrade-check.sh [--release] [OLD_REV [NEW_REV]]
#
#   OLD_REV    default: the parent of the last commit that added a file
#              under migrations/postgres/ (so the check crosses it)
#   NEW_REV    default: the working tree as it is (uncommitted changes
#              included), built in target/; a revision given here is built
#              from a git worktree like OLD_REV
#   --release  release builds instead of debug (slower to build)
#
# BATON_UPGRADE_DIR              cache of worktrees, builds and the last
#                                run's logs (default ~/.cache/baton-upgrade);
#                                nothing in it is removed, so reruns are fast
# UPGRADE_CHECK_POSTGRES_URL     a server's `postgres` database to use;
#                                default as scripts/test.sh: 127.0.0.1:5432,
#                                else a throw-away cluster on :55432
# UPGRADE_CHECK_DB               scratch database (default
#                                baton_upgrade_check), dropped at exit
# UPGRADE_CHECK_LOAD_INTERVAL    pause between submitted plans (default 0.5)
# UPGRADE_CHECK_WAIT             seconds to wait for every plan to end
#                                DONE after the load stops (default 180)
#
# Ports 3101-3102 (old replicas) and 3103-3104 (new ones) must be free.
# Builds and replicas run at niceness 10: the machine may be shared.
# Exit status 0 when every check passes, 1 when one fails, 2 on usage.
set -euo pipefail

# Everything this script starts (cargo, replicas, load) inherits this.
if (($(nice) < 10)); then exec nice -n $((10 - $(nice))) "$0" "$@"; fi

# shellcheck source-path=SCRIPTDIR source=setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$BATON_ROOT"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

# ---- settings ----

UPGRADE_DIR=${BATON_UPGRADE_DIR:-$HOME/.cache/baton-upgrade}
DB_NAME=${UPGRADE_CHECK_DB:-baton_upgrade_check}
LOAD_INTERVAL=${UPGRADE_CHECK_LOAD_INTERVAL:-0.5}
WAIT_DONE=${UPGRADE_CHECK_WAIT:-180}
RUN_DIR="$UPGRADE_DIR/last-run"
# The replicas in the order they start; the role decides the binary.
NAMES=(old-1 old-2 new-1 new-2)
declare -A PORT=([old-1]=3101 [old-2]=3102 [new-1]=3103 [new-2]=3104)
# Seconds the load runs with each new set of replicas before the next step:
# long enough for every live replica to claim some runs.
SETTLE=8

release=0
revs=()
for arg in "$@"; do
    case $arg in
        --release) release=1 ;;
        -h | --help) usage; exit 0 ;;
        -*) usage >&2; exit 2 ;;
        *) revs+=("$arg") ;;
    esac
done
((${#revs[@]} <= 2)) || { usage >&2; exit 2; }
profile=debug
cargo_profile=()
if ((release)); then
    profile=release cargo_profile=(--release)
else
    # The flags of every debug build (scripts/setup.sh): the tests' and
    # this script's builds then share target/debug instead of evicting
    # each other, and the binary stays small.
    export RUSTFLAGS="$BATON_DEBUG_RUSTFLAGS"
fi

declare -A PID=() RID=() BIN=()
load_pid=""
db_created=0
failures=0
passes=0

say() { printf '%s\n' "$*"; }
# Seconds since the script started, to read the log of one run as a timeline.
ts() { printf '[%4ds] %s\n' "$SECONDS" "$*"; }
check() {
    # check OK|FAIL TEXT: one line of the verdict; any FAIL makes exit 1.
    if [[ $1 == OK ]]; then
        passes=$((passes + 1)); printf 'PASS  %s\n' "$2"
    else
        failures=$((failures + 1)); printf 'FAIL  %s\n' "$2"
    fi
}
ok_if() { if "$@"; then echo OK; else echo FAIL; fi; }

# ---- revisions and builds ----

commit_of() { git rev-parse --verify --quiet "$1^{commit}" || die "not a revision: $1"; }

default_old() {
    local added
    added=$(git log -1 --format=%H --diff-filter=A -- migrations/postgres)
    [[ -n $added ]] || die "no commit adds a file under migrations/postgres"
    git rev-parse "$added^"
}

# build_rev REV: prints the path of REV's `baton`, built in a worktree of
# its own under $UPGRADE_DIR/<commit> with a target dir there too, so it
# never disturbs target/ and a second run only asks cargo (a no-op).
build_rev() {
    local commit=$1 short dir
    short=$(git rev-parse --short=12 "$commit")
    dir="$UPGRADE_DIR/$short"
    if ! git -C "$dir/src" rev-parse --verify --quiet HEAD >/dev/null 2>&1; then
        # A worktree whose directory was deleted by hand is still registered.
        git worktree prune
        step "Checking out $short in $dir/src"
        mkdir -p "$dir"
        git worktree add --detach "$dir/src" "$commit" >&2
    fi
    [[ $(git -C "$dir/src" rev-parse HEAD) == "$commit" ]] ||
        die "$dir/src is not at $commit (remove it with git worktree remove)"
    step "Building $short ($profile; the first build takes ~10 min on 2 cores)"
    (cd "$dir/src" && CARGO_TARGET_DIR="$dir/target" cargo build "${cargo_profile[@]}" -p server --bin baton >&2)
    printf '%s\n' "$dir/target/$profile/baton"
}

# The working tree's build, in its usual target dir (shares target/debug).
build_tree() {
    step "Building the working tree ($profile)"
    cargo build "${cargo_profile[@]}" -p server --bin baton >&2
    printf '%s\n' "${CARGO_TARGET_DIR:-$BATON_ROOT/target}/$profile/baton"
}

# Migration versions (the number each file name starts with) of NEW.
new_versions() {
    local files
    if [[ -z $new_commit ]]; then
        files=$(cd migrations/postgres && ls -- *.sql)
    else
        files=$(git ls-tree --name-only "$new_commit" migrations/postgres/ | sed 's|.*/||')
    fi
    sed -n 's/^0*\([0-9][0-9]*\)_.*\.sql$/\1/p' <<<"$files" | sort -n | paste -sd, -
}

# ---- the database and the replicas ----

sql() { psql "$DB_URL" -X -q -A -t -v ON_ERROR_STOP=1 -c "$1"; }
# A table for people, with its column names.
sql_table() { psql "$DB_URL" -X -q -P footer=off -v ON_ERROR_STOP=1 -c "$1" | sed '/^$/d; s/^/      /'; }

api() { curl -sf --max-time 5 "http://127.0.0.1:$1$2"; }
http_code() { curl -s -o /dev/null --max-time 5 -w '%{http_code}' "http://127.0.0.1:$1$2" || true; }

# start_replica NAME: `baton serve` of its role's build on its port, with
# only the settings below: BATON_* variables of the caller's shell (a users
# file, labels) would change what is tested.
start_replica() {
    local name=$1 var
    (
        for var in $(compgen -e -X '!BATON_*'); do unset "$var"; done
        export NO_COLOR=1 \
            BATON_DATABASE_URL="$DB_URL" \
            BATON_LISTEN="127.0.0.1:${PORT[$name]}" \
            BATON_WORKERS=4 \
            BATON_POLL_INTERVAL=200ms
        exec "${BIN[$name]}" serve
    ) >"$RUN_DIR/$name.log" 2>&1 &
    PID[$name]=$!
    ts "started $name ($(role_of "$name") build) on :${PORT[$name]}, pid ${PID[$name]}"
}

role_of() { if [[ $1 == old-* ]]; then say "OLD $old_short"; else say "NEW"; fi; }

# wait_ready NAME: until /readyz answers 200 (the database answers and
# every migration this build knows is applied), then reads its replica id.
wait_ready() {
    local name=$1 tries
    for ((tries = 0; ; tries++)); do
        if ! kill -0 "${PID[$name]}" 2>/dev/null; then
            tail -n 20 "$RUN_DIR/$name.log" >&2
            die "$name exited at start (log above: $RUN_DIR/$name.log)"
        fi
        [[ $(http_code "${PORT[$name]}" /readyz) == 200 ]] && break
        ((tries < 240)) || die "$name not ready after 120 s ($RUN_DIR/$name.log)"
        sleep 0.5
    done
    RID[$name]=$(api "${PORT[$name]}" /metrics | sed -n 's/^baton_info{replica_id="\([^"]*\)".*/\1/p')
    [[ -n ${RID[$name]} ]] || die "$name: no baton_info in /metrics"
    ts "$name ready: replica ${RID[$name]}"
}

# stop_replica NAME SIGNAL: sends it and waits for the process to end.
stop_replica() {
    local name=$1 sig=$2 rc=0 tries
    kill "-$sig" "${PID[$name]}"
    # 40 s: more than BATON_SHUTDOWN_GRACE (30 s) for the SIGTERM case.
    for ((tries = 0; tries < 400; tries++)); do
        kill -0 "${PID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    wait "${PID[$name]}" 2>/dev/null || rc=$?
    unset "PID[$name]"
    stop_rc=$rc
}

# The ports the load submits to: those a balancer would route to now.
set_ports() { printf '%s\n' "$@" >"$RUN_DIR/ports.new" && mv "$RUN_DIR/ports.new" "$RUN_DIR/ports"; }

name_of_rid() {
    local name
    for name in "${NAMES[@]}"; do
        [[ ${RID[$name]:-} == "$1" ]] && { say "$name"; return; }
    done
    say "?"
}

# ---- the load ----

# plan_json N: ten 200 ms tasks on three targets shared with every fourth
# plan (so exclusion across plans is exercised), with dependencies, and
# three attempts each: the crashed replica's runs fail and must run again.
plan_json() {
    local n=$1 k deps sep=""
    printf '{"name":"upgrade-%d","tasks":[' "$n"
    for ((k = 0; k < 10; k++)); do
        case $k in
            3) deps='["t0"]' ;;
            5) deps='["t1","t2"]' ;;
            6) deps='["t3"]' ;;
            9) deps='["t6","t8"]' ;;
            *) deps='[]' ;;
        esac
        printf '%s{"name":"t%d","target":"upgrade/g%d/t%d","sleep":"200ms","max_attempts":3,"depends_on":%s}' \
            "$sep" "$k" $((n % 4)) $((k % 3)) "$deps"
        sep=,
    done
    printf ']}'
}

# Submits plans round-robin over the ports in $RUN_DIR/ports until
# $RUN_DIR/load.stop exists. A submit that gets no answer (the replica
# died under it) is repeated on the next port with the same
# Idempotency-Key, as a client behind a balancer would: that makes one
# plan whichever replica stored the first try.
load_loop() {
    local n=0 tries port body resp code id ports
    while [[ ! -e $RUN_DIR/load.stop ]]; do
        n=$((n + 1))
        body=$(plan_json "$n")
        id=""
        for ((tries = 0; tries < 30; tries++)); do
            mapfile -t ports <"$RUN_DIR/ports"
            port=${ports[(n + tries) % ${#ports[@]}]}
            resp=$(curl -s --max-time 10 -w '\n%{http_code}' -H 'Content-Type: application/json' \
                -H "Idempotency-Key: upgrade-check-$n" --data-binary "$body" \
                "http://127.0.0.1:$port/api/v1/plans" 2>&1) || true
            code=${resp##*$'\n'}
            if [[ $code == 201 || $code == 200 ]]; then
                id=$(jq -r .id <<<"${resp%$'\n'*}" 2>/dev/null) || id=""
                [[ $id =~ ^[0-9]+$ ]] && break
            fi
            printf 'plan %d try %d to :%s: HTTP %s %s\n' "$n" "$((tries + 1))" "$port" "$code" \
                "$(head -c 300 <<<"${resp%$'\n'*}" | tr '\n' ' ')" >>"$RUN_DIR/load-errors.log"
            id=""
            sleep 0.2
        done
        if [[ -n $id ]]; then
            printf '%d %s %s %d %s\n' "$n" "$id" "$port" "$((tries + 1))" "$code" >>"$RUN_DIR/plans"
        else
            printf '%d\n' "$n" >>"$RUN_DIR/unsubmitted"
        fi
        sleep "$LOAD_INTERVAL"
    done
}

stop_load() {
    [[ -n $load_pid ]] || return 0
    touch "$RUN_DIR/load.stop"
    wait "$load_pid" 2>/dev/null || true
    load_pid=""
}

# ---- clean-up ----

cleanup() {
    local rc=$? name tries
    trap - EXIT INT TERM
    if [[ -n $load_pid ]]; then kill "$load_pid" 2>/dev/null || true; fi
    for name in "${!PID[@]}"; do kill -TERM "${PID[$name]}" 2>/dev/null || true; done
    # 200 ms tasks finish well within the shutdown grace; then be blunt.
    for ((tries = 0; tries < 150; tries++)); do
        local alive=0
        for name in "${!PID[@]}"; do kill -0 "${PID[$name]}" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.1
    done
    for name in "${!PID[@]}"; do kill -KILL "${PID[$name]}" 2>/dev/null || true; done
    if ((db_created)); then
        psql "$PG_URL" -X -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
            -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" ||
            say "could not drop the database $DB_NAME" >&2
    fi
    stop_postgres
    say "Logs of this run: $RUN_DIR (replicas, load, plans). Builds stay in $UPGRADE_DIR."
    exit "$rc"
}

# ---- main ----

for tool in curl jq psql git cargo; do
    command -v "$tool" >/dev/null || die "$tool is missing"
done
for name in "${NAMES[@]}"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/${PORT[$name]}") 2>/dev/null; then
        die "127.0.0.1:${PORT[$name]} is taken (an earlier check still running? pgrep -af 'baton serve')"
    fi
done

old_commit=$(commit_of "${revs[0]:-$(default_old)}")
old_short=$(git rev-parse --short=12 "$old_commit")
new_commit=""
if [[ -n ${revs[1]:-} ]]; then
    new_commit=$(commit_of "${revs[1]}")
    new_label=$(git rev-parse --short=12 "$new_commit")
else
    dirty=$(git status --porcelain --untracked-files=no | wc -l)
    new_label="working tree at $(git rev-parse --short=12 HEAD)"
    ((dirty == 0)) || new_label+=" + $dirty modified files"
fi

step "Revisions"
say "OLD: $old_short  $(git log -1 --format=%s "$old_commit" | cut -c1-90)"
say "NEW: $new_label"
if [[ -n $new_commit ]]; then
    crossing=$(git diff --name-only "$old_commit" "$new_commit" -- migrations/postgres)
else
    # The working tree: committed or not, plus migration files not yet added.
    crossing=$(
        git diff --name-only "$old_commit" -- migrations/postgres
        git ls-files --others --exclude-standard -- migrations/postgres
    )
fi
if [[ -n $crossing ]]; then
    say "Migrations between them:"
    while IFS= read -r file; do say "  $file"; done <<<"$crossing"
else
    say "No migration lies between them: this check is not crossing a migration (going on anyway)."
fi
# The versions NEW adds, from file names such as 0013_retention.sql.
crossing_versions=$(sed -n 's|.*/0*\([0-9][0-9]*\)_[^/]*\.sql$|\1|p' <<<"$crossing" | sort -n | paste -sd, -)

build_start=$SECONDS
old_bin=$(build_rev "$old_commit")
if [[ -n $new_commit ]]; then new_bin=$(build_rev "$new_commit"); else new_bin=$(build_tree); fi
build_secs=$((SECONDS - build_start))
check_start=$SECONDS

# A fresh directory for this run's logs; the previous run's go.
rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR"
# Keep NEW apart: someone may rebuild target/ while this runs, and new-2
# starts after new-1; both must be the same build. A hard link suffices
# (a debug binary can be over 1 GB): the linker and cargo replace the file
# rather than write into it, so the link keeps this build's contents.
ln -f "$new_bin" "$RUN_DIR/baton-new" 2>/dev/null || cp "$new_bin" "$RUN_DIR/baton-new"
BIN=([old-1]="$old_bin" [old-2]="$old_bin" [new-1]="$RUN_DIR/baton-new" [new-2]="$RUN_DIR/baton-new")
say "OLD binary: $old_bin ($("$old_bin" --version))"
say "NEW binary: $new_bin ($("$RUN_DIR/baton-new" --version)), kept as $RUN_DIR/baton-new"

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ensure_postgres UPGRADE_CHECK_POSTGRES_URL
DB_URL="${PG_URL%/*}/$DB_NAME"
step "Creating the scratch database $DB_NAME"
psql "$PG_URL" -X -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
    -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" -c "CREATE DATABASE $DB_NAME"
db_created=1

step "Two OLD replicas"
# One after the other: the first applies the old migrations.
start_replica old-1
wait_ready old-1
start_replica old-2
wait_ready old-2
versions_before=$(sql "SELECT string_agg(version::text, ',' ORDER BY version) FROM _sqlx_migrations WHERE success")
say "migrations applied by OLD: $versions_before"

step "Load: a plan every ${LOAD_INTERVAL}s, round-robin over the live replicas"
set_ports "${PORT[old-1]}" "${PORT[old-2]}"
load_loop &
load_pid=$!
sleep "$SETTLE"
ts "$(wc -l <"$RUN_DIR/plans") plans submitted so far"
# Histories stored before the upgrade, as OLD's API reads them: NEW must
# read each one the same (its migrations may store history differently).
mkdir -p "$RUN_DIR/history-before"
mapfile -t early_runs < <(sql "SELECT id FROM task_run
    WHERE status IN ('DONE', 'FAILED', 'CANCELED') ORDER BY id LIMIT 100")
for id in "${early_runs[@]+"${early_runs[@]}"}"; do
    api "${PORT[old-1]}" "/api/v1/runs/$id" | jq -c .events >"$RUN_DIR/history-before/$id"
done
ts "${#early_runs[@]} finished runs' histories read from old-1"

step "One NEW replica: it applies the new migrations while the old ones serve"
start_replica new-1
wait_ready new-1
set_ports "${PORT[old-1]}" "${PORT[old-2]}" "${PORT[new-1]}"
versions_after=$(sql "SELECT string_agg(version::text, ',' ORDER BY version) FROM _sqlx_migrations WHERE success")
say "migrations now: $versions_after"
# From when the old replicas must work against the new schema: the first
# new migration's install time, else (none crossed) new-1's start.
if [[ -n $crossing_versions ]]; then
    migrated_at=$(sql "SELECT min(installed_on) FROM _sqlx_migrations WHERE version IN ($crossing_versions)")
else
    migrated_at=$(sql "SELECT now()")
fi
[[ -n $migrated_at ]] || migrated_at=$(sql "SELECT now()")
say "new schema in place since $migrated_at"
sleep "$SETTLE"

step "While versions are mixed"
sql_table "SELECT replica_id, version, round(extract(epoch FROM now() - last_heartbeat)::numeric, 1)
    AS heartbeat_age_s FROM replica ORDER BY started_at"
alive_view=$(api "${PORT[old-1]}" /api/v1/replicas |
    jq -r '.[] | [.replica_id, (.alive | tostring), (.leader | tostring), (.running | tostring)] | join(" ")')
leader=$(awk '$3 == "true" { print $1 }' <<<"$alive_view")
say "GET /api/v1/replicas on old-1: $(awk '$2 == "true"' <<<"$alive_view" | wc -l) alive; leader $(name_of_rid "$leader") ${leader:-none}"
live_ok=1
for name in old-1 old-2 new-1; do
    grep -q "^${RID[$name]} true " <<<"$alive_view" || live_ok=0
done
check "$(ok_if test "$live_ok" = 1)" "mixed versions: GET /api/v1/replicas (on old-1) shows old-1, old-2 and new-1 alive"
for name in old-1 old-2; do
    code=$(http_code "${PORT[$name]}" /readyz)
    check "$(ok_if test "$code" = 200)" "mixed versions: $name /readyz answers $code against the new schema"
done
for name in old-1 old-2; do
    n=$(sql "SELECT count(*) FROM task_run WHERE replica_id = '${RID[$name]}' AND status = 'DONE'
        AND started_at > '$migrated_at'")
    check "$(ok_if test "$n" -gt 0)" "mixed versions: $name claimed and finished $n runs after the new migrations"
done
n=$(sql "SELECT count(*) FROM task_run WHERE replica_id = '${RID[new-1]}' AND status = 'DONE'")
check "$(ok_if test "$n" -gt 0)" "mixed versions: new-1 finished $n runs"
if [[ -n $crossing_versions ]]; then
    # docs/deploy.md: an old replica that restarts now does not come back.
    # `baton migrate` makes the same check as start-up and changes nothing.
    refused_rc=0
    refused=$(BATON_DATABASE_URL="$DB_URL" RUST_BACKTRACE=0 NO_COLOR=1 timeout 60 "$old_bin" migrate 2>&1) ||
        refused_rc=$?
    refused=$(grep -m1 '^Error' <<<"$refused" || tail -n 1 <<<"$refused")
    say "OLD 'baton migrate' now: exit $refused_rc: $refused"
    check "$(ok_if test "$refused_rc" -ne 0 -a -n "$(grep 'previously applied but is missing' <<<"$refused")")" \
        "mixed versions: the OLD binary refuses to start against the newer schema, as docs/deploy.md says"
fi

step "Stopping old-1 gracefully (SIGTERM), as a balancer drains it first"
set_ports "${PORT[old-2]}" "${PORT[new-1]}"
sleep 1
stop_replica old-1 TERM
ts "old-1 exited with status $stop_rc; $(grep -c 'handed runs back' "$RUN_DIR/old-1.log" || true) hand-backs in its log"
check "$(ok_if test "$stop_rc" = 0)" "old-1 stopped cleanly on SIGTERM (exit $stop_rc)"
sleep 5

step "Killing old-2 (SIGKILL) while it runs tasks: a crash mid-upgrade"
# The crash should strand runs, or the sweeper's part goes untested.
for ((tries = 0; tries < 50; tries++)); do
    held=$(sql "SELECT count(*) FROM task_run WHERE replica_id = '${RID[old-2]}' AND status = 'RUNNING'")
    ((held > 0)) && break
    sleep 0.1
done
# No "Killed" notice from bash in the middle of the report.
disown "${PID[old-2]}"
stop_replica old-2 KILL
set_ports "${PORT[new-1]}"
held=$(sql "SELECT count(*) FROM task_run WHERE replica_id = '${RID[old-2]}' AND status = 'RUNNING'")
ts "old-2 killed; it held $held RUNNING runs, for the sweeper to fail and retry after BATON_STALE_AFTER (10 s)"
crash_held=$held

step "A second NEW replica"
start_replica new-2
wait_ready new-2
set_ports "${PORT[new-1]}" "${PORT[new-2]}"
leader=$(api "${PORT[new-1]}" /api/v1/replicas | jq -r '.[] | select(.leader) | .replica_id')
ts "leader now: $(name_of_rid "$leader") ${leader:-none (the lease of a killed leader runs out within 6 s)}"
sleep "$SETTLE"
stop_load
submitted=$(wc -l <"$RUN_DIR/plans")
ts "load stopped: $submitted plans submitted"

step "Waiting up to ${WAIT_DONE}s for every plan to end"
mapfile -t pending < <(awk '{ print $2 }' "$RUN_DIR/plans")
declare -A final=()
deadline=$((SECONDS + WAIT_DONE))
last_note=$SECONDS
while ((${#pending[@]})) && ((SECONDS < deadline)); do
    still=()
    for id in "${pending[@]}"; do
        status=$(api "${PORT[new-1]}" "/api/v1/plans/$id" | jq -r .status 2>/dev/null) || status="(no answer)"
        case $status in
            DONE | FAILED | CANCELED) final[$id]=$status ;;
            *) still+=("$id") ;;
        esac
    done
    pending=("${still[@]+"${still[@]}"}")
    if ((${#pending[@]})); then
        if ((SECONDS - last_note >= 10)); then
            ts "${#pending[@]} plans not finished yet"
            last_note=$SECONDS
        fi
        sleep 1
    fi
done
ts "$((submitted - ${#pending[@]})) of $submitted plans finished"
# Whatever is still open, as the API has it now (404 = lost).
for id in "${pending[@]+"${pending[@]}"}"; do
    final[$id]=$(curl -s --max-time 5 -o /dev/null -w 'HTTP %{http_code}' "http://127.0.0.1:${PORT[new-1]}/api/v1/plans/$id")
    [[ ${final[$id]} != "HTTP 200" ]] ||
        final[$id]=$(api "${PORT[new-1]}" "/api/v1/plans/$id" | jq -r '"still " + .status')
done

step "Checks"
done_plans=0
for id in "${!final[@]}"; do [[ ${final[$id]} == DONE ]] && done_plans=$((done_plans + 1)); done
check "$(ok_if test "$done_plans" = "$submitted" -a "$submitted" -gt 0)" \
    "plans: $done_plans of $submitted submitted plans are DONE"
for id in "${!final[@]}"; do
    [[ ${final[$id]} == DONE ]] || say "      plan $id: ${final[$id]}"
done
unsubmitted=0
[[ -f $RUN_DIR/unsubmitted ]] && unsubmitted=$(wc -l <"$RUN_DIR/unsubmitted")
retried=$(awk '$4 > 1' "$RUN_DIR/plans" | wc -l)
check "$(ok_if test "$unsubmitted" = 0)" \
    "submits: every plan was accepted ($unsubmitted never were; $retried needed another try, same Idempotency-Key)"
in_db=$(sql "SELECT count(*) FROM plan")
distinct_ids=$(awk '{ print $2 }' "$RUN_DIR/plans" | sort -u | wc -l)
check "$(ok_if test "$in_db" = "$submitted" -a "$distinct_ids" = "$submitted")" \
    "submits: $in_db plans in the database, $distinct_ids distinct ids for $submitted submits (none made twice)"
tasks=$(sql "SELECT count(*) FROM task")
dups=$(sql "SELECT count(*) FROM (SELECT task_id FROM task_run WHERE status = 'DONE'
    GROUP BY task_id HAVING count(*) > 1) d")
check "$(ok_if test "$dups" = 0)" "no duplicate: $dups tasks with more than one DONE run"
without=$(sql "SELECT count(*) FROM task t WHERE NOT EXISTS
    (SELECT 1 FROM task_run r WHERE r.task_id = t.id AND r.status = 'DONE')")
check "$(ok_if test "$without" = 0 -a "$tasks" = $((submitted * 10)))" \
    "no loss: $tasks tasks ($((submitted * 10)) expected), $without without a DONE run"
open=$(sql "SELECT count(*) FROM task_run WHERE status IN ('PENDING', 'AVAILABLE', 'RUNNING')")
check "$(ok_if test "$open" = 0)" "nothing stranded: $open runs PENDING, AVAILABLE or RUNNING"
# From migration 0028 on, claimers take AVAILABLE runs from a queue that
# older builds do not keep and newer ones repair: with nothing AVAILABLE
# left, nothing may be left in it either.
if [[ $(sql "SELECT to_regclass('available_run') IS NOT NULL") == t ]]; then
    queued=$(sql "SELECT count(*) FROM available_run")
    check "$(ok_if test "$queued" = 0)" "the queue of AVAILABLE runs is empty: $queued rows left"
fi
# From migration 0030 on, PostgreSQL finds finished runs through the
# finish log, which older builds do not write (a trigger writes it for
# them while one may write): every finished run must be listed once, with
# its end time and final status, however many of them an old build ended.
if [[ $(sql "SELECT to_regclass('finish_log') IS NOT NULL") == t ]]; then
    unlisted=$(sql "SELECT count(*) FROM task_run r WHERE r.finished_at IS NOT NULL
        AND (SELECT count(*) FROM finish_log l WHERE r.id = ANY(l.runs)
            AND l.finished_at = r.finished_at AND l.status = r.status) <> 1")
    finished=$(sql "SELECT count(*) FROM task_run WHERE finished_at IS NOT NULL")
    check "$(ok_if test "$unlisted" = 0 -a "$finished" -gt 0)" \
        "the finish log lists each of $finished finished runs once: $unlisted do not"
fi
# A run's own retry must start after the sweeper failed it (by the stored
# times: the retry waits out a backoff of a second or more).
task_overlap=$(sql "SELECT count(*) FROM task_run a JOIN task_run b ON a.task_id = b.task_id AND a.id < b.id
    WHERE a.started_at < coalesce(b.finished_at, now()) AND b.started_at < coalesce(a.finished_at, now())")
check "$(ok_if test "$task_overlap" = 0)" "no task ran twice at once: $task_overlap overlapping pairs of runs of one task"
# Exclusion by the order the events were written (their ids come from one
# sequence), as the conformance suite's replay judges it: a run holds its
# target from its promotion to its end, and a promotion is written only
# after the holder's end committed. The stamped times cannot judge it: a
# claim is stamped with the claimer's clock before it waits for the claim
# lock, and can read a few milliseconds earlier than the promotion it
# followed (seen under load, 2026-11-27).
# A transition is an event row or, from NEW's migrations on, a stamp on the
# run's row under the number its row would have had (docs/design.md,
# "Status model"); GREATEST skips whichever is NULL.
holds="WITH h AS (SELECT r.id, r.target, r.exclusive, r.started_at, r.finished_at, r.replica_id,
        GREATEST(r.available_seq, (SELECT max(e.id) FROM run_event e WHERE e.run_id = r.id
            AND e.from_status = 'PENDING' AND e.to_status = 'AVAILABLE')) AS held_from,
        GREATEST(r.ended_seq, (SELECT max(e.id) FROM run_event e WHERE e.run_id = r.id
            AND e.to_status = 'DONE')) AS held_to
    FROM task_run r WHERE r.status = 'DONE')"
pairs="FROM h a JOIN h b ON a.target = b.target AND a.id < b.id AND (a.exclusive OR b.exclusive)"
target_overlap=$(sql "$holds SELECT count(*) $pairs
    WHERE a.held_from < b.held_to AND b.held_from < a.held_to")
stamped_overlap=$(sql "$holds SELECT count(*) || ' pairs, by at most ' ||
        coalesce(round(extract(epoch FROM max(least(a.finished_at, b.finished_at)
            - greatest(a.started_at, b.started_at))) * 1000, 1), 0) || ' ms' $pairs
    WHERE a.started_at < b.finished_at AND b.started_at < a.finished_at")
check "$(ok_if test "$target_overlap" = 0)" \
    "exclusion held: $target_overlap pairs of DONE runs on one exclusive target held it at once, by the events' order (by their stamped times: $stamped_overlap)"
if [[ $target_overlap != 0 ]]; then
    sql_table "$holds SELECT a.target, a.id AS a_run, a.replica_id AS a_replica, a.held_from AS a_from,
            a.held_to AS a_to, b.id AS b_run, b.replica_id AS b_replica, b.held_from AS b_from,
            b.held_to AS b_to $pairs
        WHERE a.held_from < b.held_to AND b.held_from < a.held_to"
fi

changed=0
for id in "${early_runs[@]+"${early_runs[@]}"}"; do
    after=$(api "${PORT[new-1]}" "/api/v1/runs/$id" | jq -c .events) || after="(no answer)"
    if [[ $after != "$(cat "$RUN_DIR/history-before/$id")" ]]; then
        changed=$((changed + 1))
        say "      run $id's history changed: $(diff <(jq . "$RUN_DIR/history-before/$id") <(jq . <<<"$after") | head -5 | tr '\n' ' ')"
    fi
done
check "$(ok_if test "$changed" = 0 -a "${#early_runs[@]}" -gt 0)" \
    "histories kept: ${#early_runs[@]} runs finished before the upgrade read the same on new-1 as on old-1 ($changed differ)"

say "      runs by status:"
sql_table "SELECT status, count(*) AS runs FROM task_run GROUP BY status ORDER BY status"
say "      runs by replica (DONE after = started after the new migrations, $migrated_at):"
{
    printf '%-6s %-5s %-38s %-20s %6s %11s %7s\n' replica port replica_id build DONE "DONE after" FAILED
    while IFS='|' read -r rid done_n after_n failed_n; do
        name=$(name_of_rid "$rid")
        build=NEW
        if [[ $name == old-* ]]; then build="OLD $old_short"; fi
        printf '%-6s %-5s %-38s %-20s %6s %11s %7s\n' "$name" "${PORT[$name]:-}" "$rid" \
            "$build" "$done_n" "$after_n" "$failed_n"
    done < <(sql "SELECT replica_id, count(*) FILTER (WHERE status = 'DONE'),
        count(*) FILTER (WHERE status = 'DONE' AND started_at > '$migrated_at'),
        count(*) FILTER (WHERE status = 'FAILED')
        FROM task_run WHERE replica_id IS NOT NULL GROUP BY replica_id ORDER BY min(started_at)")
} | sed 's/^/      /'
old_done=$(sql "SELECT count(*) FROM task_run WHERE status = 'DONE'
    AND replica_id IN ('${RID[old-1]}', '${RID[old-2]}')")
new_done=$(sql "SELECT count(*) FROM task_run WHERE status = 'DONE'
    AND replica_id IN ('${RID[new-1]}', '${RID[new-2]}')")
check "$(ok_if test "$old_done" -gt 0 -a "$new_done" -gt 0)" \
    "both builds ran tasks: $old_done DONE runs on OLD replicas, $new_done on NEW ones"
failed=$(sql "SELECT count(*) FROM task_run WHERE status = 'FAILED'")
failed_crash=$(sql "SELECT count(*) FROM task_run WHERE status = 'FAILED' AND replica_id = '${RID[old-2]}'")
check "$(ok_if test "$failed" = "$failed_crash")" \
    "failures: $failed FAILED runs, $failed_crash of them the crashed old-2's (it held $crash_held when killed); every one retried to DONE"
if ((failed)); then
    say "      their errors:"
    sql_table "SELECT left(error, 110) AS error, count(*) AS runs FROM task_run WHERE status = 'FAILED'
        GROUP BY 1 ORDER BY 2 DESC LIMIT 5"
fi

versions_end=$(sql "SELECT string_agg(version::text, ',' ORDER BY version) FROM _sqlx_migrations WHERE success")
expected=$(new_versions)
say "      migrations: before (OLD) $versions_before; after (NEW) $versions_end; NEW's files $expected"
check "$(ok_if test "$versions_end" = "$expected")" \
    "migrations: the database ends at NEW's versions${crossing_versions:+ (new: $crossing_versions)}"

step "Result"
say "builds: ${build_secs}s; check: $((SECONDS - check_start))s"
if ((failures)); then
    say "FAILED: $failures of $((passes + failures)) checks (logs: $RUN_DIR)"
    exit 1
fi
say "PASSED: all $passes checks"
