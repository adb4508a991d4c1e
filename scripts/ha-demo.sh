#!/usr/bin/env bash
# High availability on one machine: a PostgreSQL, three `baton serve`
# replicas on 127.0.0.1:3001, 3002 and 3003 sharing the database
# baton_demo, the README's example plan, and a plan with one long task
# pinned to each replica. Prints what to open and how to kill a replica,
# then reports what the others do about it (the dead one going stale, the
# leader moving, its task failing and running again elsewhere) until
# Ctrl-C, which stops everything this script started.
#
#   scripts/ha-demo.sh [--no-build]
#
#   --no-build  use target/release/baton as built (it carries the dashboard)
#
# HA_DEMO_POSTGRES_URL  a server's `postgres` database to use; default: the
#                       one on 127.0.0.1:5432, else a throw-away cluster on
#                       127.0.0.1:55432 (as scripts/test.sh)
# HA_DEMO_TASK_TIME     how long each pinned task runs (default 3m)
#
# Production setup: docs/deploy.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$BATON_ROOT"

build=1
case ${1:-} in
    --no-build) build=0 ;;
    "") ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "usage: scripts/ha-demo.sh [--no-build]" ;;
esac

PORTS=(3001 3002 3003)
DEMO_DB=baton_demo
DEMO_DIR="$BATON_ROOT/target/ha-demo"
TASK_TIME=${HA_DEMO_TASK_TIME:-3m}
BATON="$BATON_ROOT/target/release/baton"
# Failover in seconds rather than the defaults' 11 s. The leader lease
# stays at most the staleness bound, and heartbeats come at least twice
# within it (serve refuses less).
HEARTBEAT=1s STALE=5s LEASE=3s SWEEP=1s GRACE=2s
REASSIGN=2s

pids=()
# EPOCHREALTIME with a decimal point, for awk.
LC_NUMERIC=C

say() { printf '%s\n' "$*"; }
now() { date +%H:%M:%S; }

cleanup() {
    local rc=$? pid n waited
    trap - EXIT INT TERM
    if ((${#pids[@]})); then
        step "Stopping the replicas this script started"
        for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
        # Each hands its runs back within BATON_SHUTDOWN_GRACE ($GRACE).
        for ((waited = 0; waited < 20; waited++)); do
            n=0
            for pid in "${pids[@]}"; do if kill -0 "$pid" 2>/dev/null; then n=$((n + 1)); fi; done
            ((n)) || break
            sleep 0.5
        done
        for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    fi
    if ((pg_started)); then step "Stopping the throw-away PostgreSQL"; fi
    stop_postgres
    if ((${#pids[@]})); then
        say "Logs: $DEMO_DIR/replica-{1,2,3}.log. The database $DEMO_DB stays for a look; the next run drops it."
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ((build)); then
    baton_setup --release
    scripts/build-site.sh --release
    step "Compiling the server (release)"
    cargo build --release -p server --bin baton
fi
[[ -x $BATON ]] || die "$BATON is missing: run without --no-build"

for tool in curl jq; do
    if ! command -v "$tool" >/dev/null; then
        step "Installing $tool (Debian package)"
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$tool"
    fi
done
for port in "${PORTS[@]}"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "127.0.0.1:$port is taken (an earlier demo still running? pgrep -af 'baton serve')"
    fi
done

ensure_postgres HA_DEMO_POSTGRES_URL
PSQL=$(command -v psql || true)
[[ -n $PSQL ]] || PSQL="$(find_pg_bin)/psql"
DB_URL="${PG_URL%/*}/$DEMO_DB"
step "Dropping the database $DEMO_DB if an earlier demo left it, and creating it empty"
"$PSQL" "$PG_URL" -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $DEMO_DB" -c "CREATE DATABASE $DEMO_DB" ||
    die "cannot re-create $DEMO_DB (is an earlier demo still connected? pgrep -af 'baton serve')"

# Three replicas of one binary; only the port and the node label differ.
# They start together: the first to take the migration lock applies the
# migrations, the others find them applied.
mkdir -p "$DEMO_DIR"
step "Starting three replicas on ${PORTS[*]} (logs in target/ha-demo/)"
for i in 0 1 2; do
    n=$((i + 1))
    NO_COLOR=1 \
        BATON_DATABASE_URL="$DB_URL" \
        BATON_LISTEN="127.0.0.1:${PORTS[i]}" \
        BATON_LABELS="demo-$n" \
        BATON_HEARTBEAT_INTERVAL=$HEARTBEAT \
        BATON_STALE_AFTER=$STALE \
        BATON_LEADER_LEASE=$LEASE \
        BATON_SWEEP_INTERVAL=$SWEEP \
        BATON_SHUTDOWN_GRACE=$GRACE \
        "$BATON" serve >"$DEMO_DIR/replica-$n.log" 2>&1 &
    pids+=("$!")
    # No "Killed" notice from bash when one is killed: the report says it.
    disown
done

api() { curl -sf --max-time 2 "http://127.0.0.1:$1$2"; }

for i in 0 1 2; do
    for ((tries = 0; ; tries++)); do
        if ! kill -0 "${pids[i]}" 2>/dev/null; then
            tail -n 20 "$DEMO_DIR/replica-$((i + 1)).log" >&2
            die "replica-$((i + 1)) exited at start (log above)"
        fi
        if api "${PORTS[i]}" /readyz >/dev/null; then break; fi
        ((tries < 120)) || die "replica-$((i + 1)) not ready after 60 s (target/ha-demo/replica-$((i + 1)).log)"
        sleep 0.5
    done
done
ids=()
for i in 0 1 2; do
    ids+=("$(api "${PORTS[i]}" /metrics | sed -n 's/^baton_info{replica_id="\([^"]*\)".*/\1/p')")
done
say "all three answer /readyz: replica-1 ${ids[0]}, replica-2 ${ids[1]}, replica-3 ${ids[2]}"

# replica-N for one of this demo's replica ids; any other id as it is.
name_of() {
    local i
    for i in 0 1 2; do [[ $1 == "${ids[i]}" ]] && { printf 'replica-%s' $((i + 1)); return; }; done
    printf '%s' "${1:-none}"
}

submit() {
    "$BATON" submit --server "http://127.0.0.1:$1" --json - | jq -r .id
}

step "Submitting the example plan (examples/release-42.yaml) to replica-1"
plan_release=$(sed "s/RUN_AT/$(date -u -d '+15 seconds' +%Y-%m-%dT%H:%M:%SZ)/" examples/release-42.yaml | submit 3001)

cat >"$DEMO_DIR/failover-demo.yaml" <<EOF
# Written by scripts/ha-demo.sh: one long task pinned to each replica's
# label, so whichever replica you kill was running one. Two attempts: the
# second runs elsewhere once reassign_after passes without the label.
name: failover-demo
description: Kill a replica and watch its task fail over
tasks:
  - {name: on-replica-1, target: demo/one,   node: demo-1, reassign_after: $REASSIGN, max_attempts: 2, sleep: $TASK_TIME}
  - {name: on-replica-2, target: demo/two,   node: demo-2, reassign_after: $REASSIGN, max_attempts: 2, sleep: $TASK_TIME}
  - {name: on-replica-3, target: demo/three, node: demo-3, reassign_after: $REASSIGN, max_attempts: 2, sleep: $TASK_TIME}
EOF
step "Submitting target/ha-demo/failover-demo.yaml to replica-2"
plan_failover=$(submit 3002 <"$DEMO_DIR/failover-demo.yaml")

# Until the pinned tasks run and a leader is known.
leader=""
for ((tries = 0; tries < 40; tries++)); do
    running=$(api 3001 "/api/v1/plans/$plan_failover" | jq '[.tasks[] | select(.status == "RUNNING")] | length' || echo 0)
    leader=$(api 3001 /api/v1/replicas | jq -r '.[] | select(.leader) | .replica_id' || true)
    [[ $running == 3 && -n $leader ]] && break
    sleep 0.5
done
lead=0
for i in 0 1 2; do [[ ${ids[i]} == "$leader" ]] && lead=$i; done

bold() { if [[ -t 1 ]]; then printf '\033[1m%s\033[0m\n' "$*"; else say "$*"; fi; }
say
bold "Three replicas of target/release/baton share $DB_URL"
for i in 0 1 2; do
    printf '  replica-%s  http://127.0.0.1:%s  pid %-7s %s  label demo-%s%s\n' $((i + 1)) "${PORTS[i]}" \
        "${pids[i]}" "${ids[i]}" $((i + 1)) "$([[ $i == "$lead" && -n $leader ]] && echo '  (leader)')"
done
say
bold "Open (any port serves every page: all state, sign-ins included, is in the database)"
printf '  %-32s %s\n' \
    "http://127.0.0.1:3001/replicas" "heartbeats, alive or stale, the leader, runs held" \
    "http://127.0.0.1:3002/plans/$plan_failover" "failover-demo: one $TASK_TIME task pinned to each replica" \
    "http://127.0.0.1:3003/plans/$plan_release" "release-42, the README's example: DONE within ~20 s"
say "  (Kill a replica while it runs a task of release-42 and that task ends FAILED, as it"
say "  allows one attempt: the plan halts until you press Retry on its page.)"
say
bold "Kill a replica as a crash would (no clean shutdown)"
say "  kill -9 ${pids[lead]}      # replica-$((lead + 1)), the leader: shows the lease moving too"
for i in 0 1 2; do
    ((i == lead)) || say "  kill -9 ${pids[i]}      # replica-$((i + 1))"
done
say
bold "What follows (this demo: heartbeat $HEARTBEAT, stale after $STALE, lease $LEASE, sweep $SWEEP)"
say "  - its port stops answering; the other two keep serving the same data"
say "  - the leader lease, if it held it, expires within $LEASE and a survivor takes it"
say "    (Replicas page: Leader moves)"
say "  - within $STALE its heartbeat is stale (Replicas page: stale, heartbeat age growing)"
say "  - within ${STALE%s} + ${SWEEP%s} = $((${STALE%s} + ${SWEEP%s})) s the leader's sweeper fails the task it ran: attempt 1 of"
say "    on-replica-N ends FAILED \"replica r-… stopped heart-beating at …\" (on that run's page),"
say "    and attempt 2 waits the retry backoff (1 s), then \"no live replica labelled demo-N\""
say "    until reassign_after ($REASSIGN) has passed, then runs on a survivor; failover-demo"
say "    ends DONE $TASK_TIME later"
say "  With the defaults (stale 10s, lease 6s, sweep 1s) the same takes up to 11 s."
say "  Submit failover-demo again to kill another:"
say "    target/release/baton submit --server http://127.0.0.1:3001 target/ha-demo/failover-demo.yaml"
say
bold "Reporting what happens below; Ctrl-C stops the replicas."
say

# ---- the report, until Ctrl-C ----
declare -A seen_task=() seen_plan=() alive_of=() run_of=()
seen_leader=$leader
dead=(0 0 0)
died_at=""

# Seconds since the first replica died, as " (+4.5 s)", or nothing.
since() {
    [[ -n $died_at ]] || return 0
    awk -v a="$EPOCHREALTIME" -v b="$died_at" 'BEGIN { printf " (+%.1f s)", a - b }'
}
report() { say "$(now)$(since)  $*"; }

# watch_plan PLAN PORT: reports the plan's status changes, its tasks'
# status changes and what each PENDING task waits for.
watch_plan() {
    local plan=$1 body name status line task attempt tstatus replica run cause error prev
    body=$(api "$2" "/api/v1/plans/$plan") || return 0
    name=$(jq -r .name <<<"$body")
    status=$(jq -r .status <<<"$body")
    if [[ ${seen_plan[$plan]:-} != "$status" ]]; then
        seen_plan[$plan]=$status
        report "plan $plan $name: $status"
    fi
    while IFS=$'\x1f' read -r task attempt tstatus replica run cause error; do
        line="$attempt $tstatus $replica"
        if [[ $tstatus == PENDING ]]; then line+=" $cause"; fi
        [[ ${seen_task[$plan/$task]:-} != "$line" ]] || continue
        # A new attempt: say how the previous one ended.
        prev=${run_of[$plan/$task]:-}
        if [[ -n $prev && $prev != "$run" ]]; then
            report "$name: $task attempt $((attempt - 1)) $(api "$2" "/api/v1/runs/$prev" |
                jq -r '.status + (if .error then ": " + .error else "" end)') (http://127.0.0.1:$2/runs/$prev)"
        fi
        run_of[$plan/$task]=$run
        seen_task[$plan/$task]=$line
        case $tstatus in
            RUNNING) report "$name: $task attempt $attempt RUNNING on $(name_of "$replica")" ;;
            PENDING) report "$name: $task attempt $attempt PENDING${cause:+: $cause}" ;;
            *) report "$name: $task${attempt:+ attempt $attempt} $tstatus${error:+: $error}" ;;
        esac
    # \x1f between fields: with a tab, read would merge empty ones.
    done < <(jq -r '.tasks[] | [.name, .attempt, .status, .replica_id, .run_id, .waiting_cause, .error]
        | map(. // "" | tostring | gsub("\n"; " ")) | join("\u001f")' <<<"$body")
}

while true; do
    port=""
    for i in 0 1 2; do
        if ((!dead[i])) && ! kill -0 "${pids[i]}" 2>/dev/null; then
            dead[i]=1
            [[ -n $died_at ]] || died_at=$EPOCHREALTIME
            report "replica-$((i + 1)) (pid ${pids[i]}, ${ids[i]}) has exited; times from here on count from this line"
        fi
        if ((!dead[i])) && [[ -z $port ]]; then port=${PORTS[i]}; fi
    done
    if [[ -z $port ]]; then
        report "no replica is left; press Ctrl-C"
        sleep 5
        continue
    fi
    if body=$(api "$port" /api/v1/replicas); then
        while IFS=$'\x1f' read -r id alive is_leader; do
            if [[ -n ${alive_of[$id]:-} && ${alive_of[$id]} != "$alive" ]]; then
                report "$(name_of "$id") ($id) is $([[ $alive == true ]] && echo alive || echo stale) on the Replicas page"
            fi
            alive_of[$id]=$alive
            if [[ $is_leader == true && $id != "$seen_leader" ]]; then
                report "$(name_of "$id") ($id) holds the leader lease now"
                seen_leader=$id
            fi
        done < <(jq -r '.[] | [.replica_id, .alive, .leader] | map(tostring) | join("\u001f")' <<<"$body")
    fi
    watch_plan "$plan_release" "$port"
    watch_plan "$plan_failover" "$port"
    sleep 0.5
done
