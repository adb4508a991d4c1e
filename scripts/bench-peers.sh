#!/usr/bin/env bash
# Baton next to graphile-worker (a Node.js job queue on PostgreSQL): both
# on the same PostgreSQL in one sitting, taking turns, several rounds, then
# a table of each side's figures and the ratio Baton/graphile per round
# with its median and spread.
#
#   scripts/bench-peers.sh [options] [-- baton bench options...]
#
#   --rounds K        rounds (default 5); graphile goes first in odd rounds,
#                     Baton in even ones, so neither always gets the
#                     warmer (or the more tired) machine
#   --jobs N          no-op runs/jobs per throughput phase (default 20000)
#   --plans P         Baton: plans the runs are spread over; graphile: the
#                     addJobs calls of its end-to-end phase (default 20)
#   --targets T       Baton: targets the runs are spread over (default 200)
#   --samples S       pickup-latency samples per side (default 200)
#   --concurrency C   graphile: concurrent jobs (default 16; the quick
#                     stats of its docs ran 4 processes of 24)
#   --local-queue L   graphile: localQueue.size (default 500; -1 is off)
#   --settle SECONDS  pause before each bench (default 2)
#   --warm-up N       full queue: runs/jobs each side's workers work
#                     through before the queue is added, then stop
#                     (default 4000; 0: cold workers, the method before
#                     2026-12-02)
#   --scale           the scale curve instead: the end-to-end and
#                     full-queue phases worked by Baton's `baton serve`
#                     processes and by graphile-worker's Node processes
#                     (each with --concurrency), for every queue size and
#                     process count below, sides taking turns; then a
#                     table of medians per phase, size and count
#   --scale-jobs LIST      queue sizes (default 20000,200000)
#   --scale-processes LIST process counts (default 1,2,4)
#   -h, --help        this text
#
# After `--`, options for `baton bench` (e.g. --replicas 4; with --scale,
# e.g. --bench-workers 512).
#
# BATON_BIN                 a baton binary to use; default: build this
#                           checkout's target/release/baton (cargo reuses
#                           an up-to-date build; CARGO_TARGET_DIR is obeyed)
# BATON_PEERS_DIR           where graphile-worker and Node 22 are installed
#                           from npm, once, and each run's logs are kept
#                           (default ~/.cache/baton-peers)
# BATON_PEERS_DATABASE_URL  a server's `postgres` database; default: the one
#                           on 127.0.0.1:5432, else a throw-away cluster
#                           (as scripts/test.sh)
#
# On a shared machine run it under `nice -n 19`. A default run (5 rounds of
# 20,000) takes about a minute and a half on the 2-core development VM, a
# --scale run of 3 rounds of the default sizes about twenty minutes, plus
# the release build when it is not up to date.
#
# What each side measures. Both are three phases, in this order:
#
#   pickup latency  Baton: `baton bench`'s idle phase, one single-run plan
#                   at a time, submit -> RUNNING from the run's stored
#                   created_at and started_at. graphile: its perfTest's
#                   method: 100 jobs to warm up, a second to settle, then
#                   one job at a time, from before addJob to the start of
#                   the task function, in the worker's own process (so it
#                   includes the add's round trip, which Baton's does not).
#   end to end      --jobs no-op runs/jobs added by one client while the
#                   workers run, in --plans plans (Baton) or addJobs calls
#                   (graphile). Baton: from the first run's created_at to
#                   the last one's finished_at. graphile: from before the
#                   first addJobs call until the queue is seen empty
#                   (polled every 5 ms once every task has run).
#   full queue      every run/job added before any worker starts, then
#                   timed from the workers' start until all are done.
#                   Baton: until the last stored finished_at. graphile:
#                   from before run() until the queue is seen empty.
#                   Both start warm: before the queue is added, the same
#                   workers' pools (Baton's replicas' stores, graphile's
#                   pg.Pool) served --warm-up no-op runs/jobs worked by
#                   workers that then stopped, so no connection opens and
#                   no statement is prepared for the first time in the
#                   window, as in the other two phases (each follows a
#                   warm-up) and in a worker that has been up for a while.
#   scale curve     (--scale) the end-to-end and full-queue phases, no
#                   latency, worked by N processes: Baton's `baton serve`
#                   (`baton bench --processes N`, each with
#                   --bench-workers slots, 2048 by default), graphile's
#                   Node processes of this script, each a run() with
#                   --concurrency. No process's start-up is timed. End to
#                   end: the processes are up (Baton's registered and one
#                   holding the leader's lease; graphile's each past its
#                   run()), then one client adds the runs/jobs in --plans
#                   plans/addJobs calls, timed as above. Full queue:
#                   Baton from the start of its first promotion round
#                   (which promotes the queue), graphile from the first
#                   job's start in any process (its processes wait at a
#                   barrier to start together; Baton's start as soon as
#                   they are up), until the last stored finished_at
#                   (Baton) or the queue seen empty (graphile). Beside the machine's CPU per run:
#                   PostgreSQL's processes' and the workers' processes'
#                   CPU over that time, in cores, from /proc: PostgreSQL
#                   near the machine's cores is the point where more
#                   processes cannot go faster. --jobs and --samples do
#                   not apply.
#
# The work differs, and the table does not hide it. Each Baton run is a
# task of a plan on a target; the leader's promotion round judges every
# gate for it (versions, exclusive and shared targets and capacity, plan
# limits, run_at, pins, approval, pause: docs/architecture.md), and the
# database keeps its task, its run with three status versions and 4
# events of history (docs/benchmarks.md), in `baton bench`'s default
# setup: 2 in-process replicas x 2048 slots on PostgreSQL. A graphile job
# is a bare no-op task whose row is deleted when it completes, with no
# history, in one Node process with --concurrency and the batching of the
# performance page of graphile-worker's docs (localQueue of 500,
# completeJobBatchDelay and failJobBatchDelay 0), which its quick stats
# were measured with.
# The CPU rows are the whole machine's busy time over the phase (as
# `baton bench` reports it: PostgreSQL and every other process included),
# per run: they mean something only on an otherwise idle machine.
#
# Scratch databases: `baton bench` creates and drops its own; graphile's
# are baton_peers_graphile, baton_peers_graphile_queue and (--scale)
# baton_peers_graphile_e2e, dropped after each bench (and before, should
# a killed run have left them).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Paths given relative to the caller's directory, before leaving it.
if [[ -n ${BATON_BIN:-} ]]; then BATON_BIN=$(realpath -m -- "$BATON_BIN"); fi
PEERS_DIR=$(realpath -m -- "${BATON_PEERS_DIR:-$HOME/.cache/baton-peers}")
cd "$BATON_ROOT"

# Pinned so that figures from two sittings compare the same code.
# graphile-worker 0.18 needs Node >= 22.18; the npm package `node` brings
# a Node binary from the npm registry (nodejs.org is not reachable here).
NODE_VERSION=22.23.3
GRAPHILE_VERSION=0.18.0
NODE="$PEERS_DIR/node_modules/.bin/node"
GRAPHILE_JS="$PEERS_DIR/bench-graphile.mjs"
GRAPHILE_DB=baton_peers_graphile

rounds=5 jobs=20000 plans=20 targets=200 samples=200
concurrency=16 local_queue=500 settle=2 warm_up=4000
scale=0 scale_jobs=20000,200000 scale_processes=1,2,4
baton_extra=()

# The header down to (not including) "What each side measures".
usage() {
    sed -n '2,/^# What each side measures/p' "$0" | sed '$d; s/^# \{0,1\}//'
    echo "The script's header says what each side measures and how they differ."
}

is_int() { [[ $1 =~ ^-?[0-9]+$ ]]; }

parse_args() {
    while (($#)); do
        case $1 in
            -h | --help) usage; exit 0 ;;
            --) shift; baton_extra=("$@"); return ;;
            --scale) scale=1; shift ;;
            --scale-jobs | --scale-processes)
                (($# >= 2)) || die "$1 needs a value (--help)"
                [[ $2 =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
                    die "$1: not a comma-separated list of positive integers: $2"
                local list=${1#--}
                printf -v "${list//-/_}" '%s' "$2"
                shift 2
                ;;
            --rounds | --jobs | --plans | --targets | --samples | --concurrency | \
                --local-queue | --settle | --warm-up)
                (($# >= 2)) || die "$1 needs a value (--help)"
                is_int "$2" || die "$1: not an integer: $2"
                local name=${1#--}
                name=${name//-/_}
                printf -v "$name" '%s' "$2"
                shift 2
                ;;
            *) die "unknown option $1 (--help)" ;;
        esac
    done
}

check_args() {
    ((rounds >= 1)) || die "--rounds must be at least 1"
    ((plans >= 1 && jobs >= plans)) || die "need --jobs >= --plans >= 1 (as baton bench)"
    ((targets >= 1)) || die "--targets must be at least 1"
    ((samples >= 1)) || die "--samples must be at least 1: the table has latency rows"
    ((concurrency >= 1)) || die "--concurrency must be at least 1"
    ((settle >= 0)) || die "--settle must be at least 0"
    ((warm_up >= 0)) || die "--warm-up must be at least 0"
    local n
    for n in ${scale_jobs//,/ }; do
        ((n >= plans)) || die "--scale-jobs: $n is fewer than --plans ($plans)"
    done
    for n in ${scale_processes//,/ }; do
        ((n >= 1 && n <= 64)) || die "--scale-processes: $n is not between 1 and 64"
    done
}

# Node and graphile-worker in PEERS_DIR, from npm, once: a later run with
# the same pinned versions finds them and installs nothing.
ensure_graphile() {
    local want="v$NODE_VERSION $GRAPHILE_VERSION" have=""
    if [[ -x $NODE ]]; then
        have=$("$NODE" -p 'process.version + " " +
            JSON.parse(require("fs").readFileSync(process.argv[1] +
                "/node_modules/graphile-worker/package.json")).version' \
            "$PEERS_DIR" 2>/dev/null || true)
    fi
    if [[ $have != "$want" ]]; then
        # Any npm will do: it only fetches the packages, Node 22 among them.
        if ! command -v npm >/dev/null; then
            step "Installing npm (Debian package)"
            as_root apt-get update -q
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm
        fi
        step "Installing node@$NODE_VERSION and graphile-worker@$GRAPHILE_VERSION from npm into $PEERS_DIR"
        mkdir -p "$PEERS_DIR"
        # --save-exact: the package.json left there records the pins. npm
        # runs on the system's Node, so it warns (EBADENGINE) that
        # graphile-worker wants Node 22: the Node 22 it installs runs it.
        npm install --prefix "$PEERS_DIR" --no-audit --no-fund --save-exact \
            "node@$NODE_VERSION" "graphile-worker@$GRAPHILE_VERSION" >&2
        have=$("$NODE" -p 'process.version' 2>/dev/null || true)
        # The `node` package fetches its binary in a preinstall script; an
        # npm that skips install scripts leaves no binary behind.
        [[ $have == "v$NODE_VERSION" ]] ||
            die "no working Node $NODE_VERSION in $PEERS_DIR after npm install (got: ${have:-nothing}); did npm skip the node package's install script?"
    fi
}

ensure_baton() {
    if [[ -n ${BATON_BIN:-} ]]; then
        [[ -x $BATON_BIN ]] || die "BATON_BIN=$BATON_BIN is not an executable"
        return
    fi
    step "Compiling the server (release; the bench needs no dashboard bundle)"
    cargo build --release -p server --bin baton
    BATON_BIN="${CARGO_TARGET_DIR:-$BATON_ROOT/target}/release/baton"
}

# The graphile side, rewritten on every run so that it always matches
# this script. It lives in PEERS_DIR so that Node finds graphile-worker
# in the node_modules next to it.
write_graphile_js() {
    cat >"$GRAPHILE_JS" <<'JS'
// One round of graphile-worker, measured as `baton bench` measures Baton.
// Written by Baton's scripts/bench-peers.sh, which says what and how.
// Prints human lines, then one `peers:` line of key=value results.
import { parseArgs } from "node:util";
import { readFileSync, readdirSync } from "node:fs";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { run, makeWorkerUtils, Logger, consoleLogFactory } from "graphile-worker";

const { values: opt } = parseArgs({
  options: {
    url: { type: "string" }, // the server's `postgres` database
    db: { type: "string", default: "baton_peers_graphile" },
    jobs: { type: "string", default: "20000" },
    batches: { type: "string", default: "20" },
    samples: { type: "string", default: "200" },
    concurrency: { type: "string", default: "16" },
    "local-queue": { type: "string", default: "500" },
    "warm-up": { type: "string", default: "4000" }, // full queue: jobs worked before it is added
    drop: { type: "boolean", default: false }, // only drop the scratch databases
    processes: { type: "string", default: "0" }, // >0: the scale curve, with this many worker processes
    child: { type: "boolean", default: false }, // one worker process of the scale curve
  },
});
if (!opt.url) throw new Error("--url is required");
const int = (name, min) => {
  const n = Number(opt[name]);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name}: need an integer >= ${min}`);
  return n;
};
const JOBS = int("jobs", 1);
const BATCHES = int("batches", 1);
const SAMPLES = int("samples", 0);
const CONCURRENCY = int("concurrency", 1);
const LOCAL_QUEUE = int("local-queue", -1);
const PROCESSES = int("processes", 0);
const WARM_UP = int("warm-up", 0);

// Warnings and errors only: the default logger prints a line at each
// worker's start and stop, and one per job unless NO_LOG_SUCCESS is set
// (the caller sets it, as graphile-worker's perfTest does).
const logger = new Logger((scope) => {
  const log = consoleLogFactory(scope);
  return (level, message, meta) => {
    if (level === "error" || level === "warning") log(level, message, meta);
  };
});

// The batching of the performance page of graphile-worker's docs
// (worker.graphile.org/docs/performance), which its quick stats were
// measured with. Its perfTest adds `refetchDelay: { durationMs: 10 }`,
// which spares the database when many idle workers poll, and delays the
// pickup of a job added to an idle worker.
const preset = {
  worker: {
    logger,
    concurrentJobs: CONCURRENCY,
    localQueue: { size: LOCAL_QUEUE },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const ms = (x) => `${x.toFixed(2)} ms`;
const quote = (name) => pg.Client.prototype.escapeIdentifier(name);

function dbUrl(name) {
  const url = new URL(opt.url);
  url.pathname = `/${name}`;
  return url.toString();
}

async function admin(...statements) {
  const client = new pg.Client({ connectionString: opt.url });
  await client.connect();
  try {
    for (const sql of statements) await client.query(sql);
  } finally {
    await client.end();
  }
}

// A fresh database with graphile-worker's schema, and its drop.
async function scratch(name) {
  await admin(`drop database if exists ${quote(name)}`, `create database ${quote(name)}`);
  const url = dbUrl(name);
  const utils = await makeWorkerUtils({ connectionString: url, logger });
  await utils.migrate();
  return {
    url,
    utils,
    async drop() {
      await utils.release();
      await admin(`drop database if exists ${quote(name)}`);
    },
  };
}

// The worker's own pool, connected before any clock starts, sized as in
// the perfTest (concurrency + 1: one client holds the LISTEN).
async function openPool(url) {
  const pool = new pg.Pool({ connectionString: url, max: CONCURRENCY + 1 });
  pool.on("error", (e) => console.error("pool error:", e.message));
  pool.on("connect", (client) => client.on("error", (e) => console.error("client error:", e.message)));
  await pool.query("select 1");
  return pool;
}

const startWorker = (pool, taskList) => run({ pgPool: pool, taskList, noHandleSignals: true, preset });

// The whole machine's busy CPU in seconds (every process, PostgreSQL
// included), from /proc/stat as `baton bench` reads it; null elsewhere.
function busySeconds() {
  try {
    const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/);
    if (f[0] !== "cpu") return null;
    const [user, nice, system, , , irq, softirq] = f.slice(1).map(Number);
    return (user + nice + system + irq + softirq) / 100;
  } catch {
    return null;
  }
}

function cpuPerJob(busy0, jobs) {
  const busy1 = busySeconds();
  if (busy0 === null || busy1 === null) return { text: "", us: "" };
  const busy = busy1 - busy0;
  const us = (busy * 1e6) / jobs;
  return { text: `; machine busy ${busy.toFixed(2)} core-s = ${us.toFixed(0)} µs CPU/job`, us: us.toFixed(0) };
}

// CPU seconds of processes and their reaped children, by pid, from /proc/PID/stat:
// those named `name`, or those of `pids`. Fields are counted from the
// last ")" since a command name may hold spaces.
function processTicks({ name, pids }) {
  const ticks = new Map();
  let all = pids;
  if (!all) {
    try {
      all = readdirSync("/proc").filter((d) => /^[0-9]+$/.test(d)).map(Number);
    } catch {
      return null;
    }
  }
  for (const pid of all) {
    let stat;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    } catch {
      continue; // gone, or not Linux
    }
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    if (name && comm !== name) continue;
    const f = stat.slice(stat.lastIndexOf(")") + 1).trim().split(/\s+/);
    // utime, stime, and cutime and cstime: the time of reaped children,
    // which is how PostgreSQL's short-lived workers (autovacuum, parallel
    // query) count once they are gone: in the postmaster's.
    const t = f.slice(11, 15).reduce((sum, v) => sum + Math.max(0, Number(v)), 0);
    ticks.set(pid, t / 100);
  }
  return ticks;
}

// Seconds of CPU those processes used since `before` (a process that
// started in between counts from zero).
function processBusy(which, before) {
  const now = processTicks(which);
  if (!before || !now) return null;
  let busy = 0;
  for (const [pid, t] of now) busy += t - (before.get(pid) ?? 0);
  return busy;
}

// A job leaves graphile_worker.jobs when its completion is committed,
// which the batched completeJob does a moment after the task returned,
// so "all done" is the queue seen empty.
async function untilEmpty(utils) {
  for (;;) {
    const { rows } = await utils.withPgClient((c) =>
      c.query("select not exists (select 1 from graphile_worker.jobs) as empty"),
    );
    if (rows[0].empty) return;
    await sleep(5);
  }
}

// Counts a task's executions; reached(n) resolves once there were n.
function counter() {
  let count = 0;
  let want = Infinity;
  let resolve = () => {};
  return {
    task: () => {
      count += 1;
      if (count >= want) resolve();
    },
    reached(n) {
      want = n;
      return count >= n ? Promise.resolve() : new Promise((r) => (resolve = r));
    },
  };
}

const noopJobs = (from, n) =>
  Array.from({ length: n }, (_, i) => ({ identifier: "noop", payload: { id: from + i } }));

function percentile(sorted, p) {
  const rank = Math.round((p / 100) * (sorted.length - 1));
  return sorted[Math.min(rank, sorted.length - 1)];
}

const results = {};

// Phases 1 and 2, as Baton's: one worker on one database.
async function latencyAndEndToEnd() {
  const db = await scratch(opt.db);
  const pool = await openPool(db.url);
  const noop = counter();
  const added = new Map();
  const waiting = new Map();
  const latencies = [];
  const runner = await startWorker(pool, {
    noop: noop.task,
    latency: ({ id }) => {
      if (id >= 0) latencies.push(performance.now() - added.get(id));
      waiting.get(id)?.();
    },
  });
  try {
    if (SAMPLES > 0) {
      const warm = Array.from({ length: 100 }, (_, i) => ({ identifier: "latency", payload: { id: -1 - i } }));
      await db.utils.addJobs(warm);
      await untilEmpty(db.utils);
      await sleep(1000);
      for (let id = 0; id < SAMPLES; id++) {
        const ran = new Promise((r) => waiting.set(id, r));
        added.set(id, performance.now());
        await db.utils.addJob("latency", { id });
        await ran;
      }
      await untilEmpty(db.utils);
      latencies.sort((a, b) => a - b);
      const [p50, p95, p99] = [50, 95, 99].map((p) => percentile(latencies, p));
      console.log(
        `add -> task start, idle, ${latencies.length} samples: p50 ${ms(p50)} p95 ${ms(p95)} p99 ${ms(p99)} max ${ms(latencies.at(-1))}`,
      );
      Object.assign(results, { p50: p50.toFixed(2), p95: p95.toFixed(2), p99: p99.toFixed(2) });
    }

    const per = Math.floor(JOBS / BATCHES);
    const total = per * BATCHES;
    const busy0 = busySeconds();
    const t0 = performance.now();
    for (let b = 0; b < BATCHES; b++) await db.utils.addJobs(noopJobs(b * per, per));
    const submitted = performance.now() - t0;
    await noop.reached(total);
    await untilEmpty(db.utils);
    const took = performance.now() - t0;
    const cpu = cpuPerJob(busy0, total);
    const rate = (total * 1000) / took;
    console.log(
      `end to end: ${total} jobs in ${BATCHES} addJobs calls: added in ${ms(submitted)}, all done after ${ms(took)} -> ${rate.toFixed(0)} jobs/s${cpu.text}`,
    );
    Object.assign(results, { end_to_end: rate.toFixed(0), cpu_end_to_end: cpu.us });
  } finally {
    await runner.stop();
    await pool.end();
    await db.drop();
  }
}

// Phase 3, Baton's full queue: every job added before the worker starts.
async function fullQueue() {
  const db = await scratch(`${opt.db}_queue`);
  const pool = await openPool(db.url);
  const noop = counter();
  let runner = null;
  try {
    if (WARM_UP > 0) {
      // Baton's side does the same (`baton bench --warm-up-runs`).
      const warm = counter();
      const warmRunner = await startWorker(pool, { noop: warm.task });
      try {
        await db.utils.addJobs(noopJobs(-WARM_UP, WARM_UP));
        await warm.reached(WARM_UP);
        await untilEmpty(db.utils);
      } finally {
        await warmRunner.stop();
      }
    }
    let busy0 = busySeconds();
    let t0 = performance.now();
    await db.utils.addJobs(noopJobs(0, JOBS));
    const added = performance.now() - t0;
    console.log(`full queue: ${JOBS} jobs added in ${ms(added)} with no worker running${cpuPerJob(busy0, JOBS).text}`);

    busy0 = busySeconds();
    t0 = performance.now();
    runner = await startWorker(pool, { noop: noop.task });
    await noop.reached(JOBS);
    await untilEmpty(db.utils);
    const took = performance.now() - t0;
    const cpu = cpuPerJob(busy0, JOBS);
    const rate = (JOBS * 1000) / took;
    console.log(
      `full queue: ${JOBS} jobs queued before the worker started, all done ${ms(took)} after its start -> ${rate.toFixed(0)} jobs/s${cpu.text}`,
    );
    Object.assign(results, { full_queue: rate.toFixed(0), cpu_full_queue: cpu.us });
  } finally {
    if (runner) await runner.stop();
    await pool.end();
    await db.drop();
  }
}

// One worker process of the scale curve: its pool opened, it says
// "ready" and starts on "go" (stdin), so that all start together, and
// says "started" once its worker runs; on "stop" it stops and reports
// when its first task began (ms since the epoch) and how many it ran.
async function child() {
  const pool = await openPool(opt.url);
  let first = null;
  let count = 0;
  const lines = createInterface({ input: process.stdin });
  const said = (word) => new Promise((r) => lines.on("line", (l) => l.trim() === word && r()));
  const go = said("go");
  const stop = said("stop");
  console.log("ready");
  await go;
  const runner = await startWorker(pool, {
    noop: () => {
      first ??= performance.timeOrigin + performance.now();
      count += 1;
    },
  });
  console.log("started");
  await stop;
  await runner.stop();
  await pool.end();
  console.log(`ran first=${first ?? ""} count=${count}`);
  lines.close();
}

// The scale curve's two phases with PROCESSES worker processes (this
// script with --child), each on a database of its own, all started
// together:
// - end to end: the processes started, then JOBS jobs added by this
//   process in BATCHES addJobs calls, timed as the one-process phase
//   (from before the first call until the queue is seen empty);
// - full queue: JOBS jobs added, then the processes started, timed from
//   the first task's start in any of them until the queue is seen empty
//   (`baton bench --processes` times Baton's from its first promotion
//   round's start or its first claim, whichever came first).
async function processesPhase(phase) {
  const db = await scratch(`${opt.db}_${phase}`);
  const children = [];
  try {
    const per = 20000; // addJobs calls of at most this many jobs
    if (phase === "queue") {
      for (let from = 0; from < JOBS; from += per) {
        await db.utils.addJobs(noopJobs(from, Math.min(per, JOBS - from)));
      }
    }
    for (let i = 0; i < PROCESSES; i++) {
      const proc = spawn(
        process.execPath,
        [process.argv[1], "--child", "--url", db.url, "--concurrency", String(CONCURRENCY), "--local-queue", String(LOCAL_QUEUE)],
        { stdio: ["pipe", "pipe", "inherit"], env: process.env },
      );
      // Its lines as they come, kept until asked for: a line read before
      // anyone waits for it is not lost.
      const queue = [];
      const waiting = [];
      let exited = null;
      createInterface({ input: proc.stdout }).on("line", (line) => {
        if (waiting.length) waiting.shift().resolve(line);
        else queue.push(line);
      });
      proc.once("exit", (code) => {
        exited = new Error(`a worker process exited (${code})`);
        for (const w of waiting.splice(0)) w.reject(exited);
      });
      const next = () =>
        queue.length ? Promise.resolve(queue.shift())
        : exited ? Promise.reject(exited)
        : new Promise((resolve, reject) => waiting.push({ resolve, reject }));
      children.push({ proc, next });
    }
    for (const c of children) {
      while ((await c.next()) !== "ready");
    }
    // End to end, the clock starts once every worker runs, as Baton's
    // does once its processes are up: their start-up is not timed.
    const workers = { pids: children.map((c) => c.proc.pid) };
    const meters = () => [busySeconds(), processTicks({ name: "postgres" }), processTicks(workers)];
    let [busy0, postgres0, workers0] = meters();
    for (const c of children) c.proc.stdin.write("go\n");
    let start = null;
    let total = JOBS;
    if (phase === "e2e") {
      for (const c of children) {
        while ((await c.next()) !== "started");
      }
      [busy0, postgres0, workers0] = meters();
      const size = Math.floor(JOBS / BATCHES);
      total = size * BATCHES;
      start = performance.timeOrigin + performance.now();
      for (let b = 0; b < BATCHES; b++) await db.utils.addJobs(noopJobs(b * size, size));
    }
    await untilEmpty(db.utils);
    const end = performance.timeOrigin + performance.now();
    const cpu = cpuPerJob(busy0, total);
    const dbBusy = processBusy({ name: "postgres" }, postgres0);
    const ownBusy = processBusy(workers, workers0);
    const reports = [];
    for (const c of children) {
      c.proc.stdin.write("stop\n");
      let line;
      while (!(line = await c.next()).startsWith("ran ")) if (line !== "started") console.log(line);
      reports.push(line);
    }
    const ran = reports.reduce((sum, r) => sum + Number(/count=([0-9]+)/.exec(r)?.[1] ?? 0), 0);
    if (ran < total) throw new Error(`the worker processes ran ${ran} of ${total} jobs`);
    if (start === null) {
      const firsts = reports.map((r) => Number(/first=([0-9.]+)/.exec(r)?.[1])).filter(Number.isFinite);
      if (firsts.length === 0) throw new Error("no worker process ran a job");
      start = Math.min(...firsts);
    }
    const took = end - start;
    const rate = (total * 1000) / took;
    const cores = (busy) => (busy === null ? "-" : ((busy * 1000) / took).toFixed(2));
    const procs = `${PROCESSES} process${PROCESSES === 1 ? "" : "es"}`;
    const what =
      phase === "e2e"
        ? `end to end, ${procs}: ${total} jobs in ${BATCHES} addJobs calls while the processes ran, first add until empty`
        : `full queue, ${procs}: ${JOBS} jobs queued before the processes started, first start until empty`;
    console.log(`${what} ${ms(took)} -> ${rate.toFixed(0)} jobs/s${cpu.text}; cores busy: PostgreSQL ${cores(dbBusy)}, workers ${cores(ownBusy)}`);
    const key = phase === "e2e" ? "end_to_end" : "full_queue";
    Object.assign(results, {
      [key]: rate.toFixed(0),
      [`cpu_${key}`]: cpu.us,
      [`pg_cores_${key}`]: cores(dbBusy),
      [`own_cores_${key}`]: cores(ownBusy),
    });
  } finally {
    for (const c of children) c.proc.kill("SIGKILL");
    await db.drop();
  }
}

if (opt.child) {
  await child();
} else if (PROCESSES > 0) {
  console.log(
    `graphile-worker: ${PROCESSES} process${PROCESSES === 1 ? "" : "es"}, concurrency ${CONCURRENCY} each, localQueue ${LOCAL_QUEUE}, completeJobBatchDelay 0; Node ${process.version}`,
  );
  await processesPhase("e2e");
  await processesPhase("queue");
  console.log(`peers: ${Object.entries(results).map(([k, v]) => `${k}=${v}`).join(" ")}`);
} else if (opt.drop) {
  await admin(
    `drop database if exists ${quote(opt.db)}`,
    `drop database if exists ${quote(`${opt.db}_queue`)}`,
    `drop database if exists ${quote(`${opt.db}_e2e`)}`,
  );
} else {
  console.log(
    `graphile-worker: 1 process, concurrency ${CONCURRENCY}, localQueue ${LOCAL_QUEUE}, completeJobBatchDelay 0; Node ${process.version}`,
  );
  await latencyAndEndToEnd();
  await fullQueue();
  console.log(`peers: ${Object.entries(results).map(([k, v]) => `${k}=${v}`).join(" ")}`);
}
JS
}

# ---- one bench of each side ----

# Each bench leaves key=value results in `got`; record() files them under
# side, metric and round.
declare -A result=()
declare -A got=()

record() {
    local side=$1 round=$2 key
    for key in "${!got[@]}"; do result[$side:$key:$round]=${got[$key]}; done
}

# The figure after the first match of the sed pattern in a log, or die.
# Patterns match `baton bench`'s wording (server/src/bench/mod.rs).
grab() {
    local log=$1 pattern=$2 what=$3 value
    value=$(sed -n "s/$pattern/\\1/p" "$log" | head -n1)
    [[ -n $value ]] || die "no $what in $log (has baton bench's wording changed?)"
    printf '%s' "$value"
}

# Runs `baton bench` with these options, its output in the log $1.
run_baton() {
    local log=$1
    shift
    step "Baton: baton bench $*"
    # BATON_DATABASE_URL names the server; the bench makes its own databases.
    BATON_DATABASE_URL="$PG_URL" "$BATON_BIN" bench "$@" >"$log" 2>&1 ||
        { tail -n 20 "$log" >&2; die "baton bench failed (log: $log)"; }
}

bench_baton() {
    local log=$1
    local args=(--runs "$jobs" --plans "$plans" --targets "$targets" --latency-samples "$samples"
        --warm-up-runs "$warm_up" "${baton_extra[@]}")
    run_baton "$log" "${args[@]}"
    grep -E '^(baton bench|submit|throughput|full queue)' "$log" | sed 's/^/    /' >&2 || true
    got=()
    got[p50]=$(grab "$log" '^submit -> RUNNING.* p50 \([0-9.]*\) ms.*' "latency p50")
    got[p95]=$(grab "$log" '^submit -> RUNNING.* p95 \([0-9.]*\) ms.*' "latency p95")
    got[end_to_end]=$(grab "$log" '^throughput:.* -> \([0-9.]*\) runs\/s end to end.*' "end-to-end rate")
    got[full_queue]=$(grab "$log" '^full queue:.*queued before.* -> \([0-9.]*\) runs\/s.*' "full-queue rate")
    # Absent where /proc/stat cannot be read, as on graphile's side.
    got[cpu_end_to_end]=$(sed -n 's/^throughput:.* = \([0-9]*\) µs CPU\/run.*/\1/p' "$log" | head -n1)
    got[cpu_full_queue]=$(sed -n 's/^full queue:.*queued before.* = \([0-9]*\) µs CPU\/run.*/\1/p' "$log" | head -n1)
}

bench_graphile() {
    step "graphile-worker: $jobs jobs, concurrency $concurrency, localQueue $local_queue"
    run_graphile "$1" --jobs "$jobs" --batches "$plans" --samples "$samples" --warm-up "$warm_up"
}

# Runs graphile's side with these options besides the common ones, its
# output in the log $1, and files its `peers:` results in `got`.
run_graphile() {
    local log=$1 line kv
    shift
    NO_LOG_SUCCESS=1 "$NODE" "$GRAPHILE_JS" --url "$PG_URL" --db "$GRAPHILE_DB" \
        --concurrency "$concurrency" --local-queue "$local_queue" "$@" >"$log" 2>&1 ||
        { tail -n 20 "$log" >&2; die "the graphile-worker bench failed (log: $log)"; }
    grep -v '^peers:' "$log" | sed 's/^/    /' >&2 || true
    line=$(sed -n 's/^peers: //p' "$log")
    [[ -n $line ]] || die "no results line in $log"
    got=()
    for kv in $line; do got[${kv%%=*}]=${kv#*=}; done
}

# The scale curve's benches: both throughput phases, with $2 runs/jobs and
# $3 processes.
bench_baton_scale() {
    local log=$1 n=$2 procs=$3 line phase key
    local args=(--runs "$n" --plans "$plans" --targets "$targets" --processes "$procs" "${baton_extra[@]}")
    run_baton "$log" "${args[@]}"
    got=()
    for phase in "end to end:end_to_end" "full queue:full_queue"; do
        key=${phase#*:} phase=${phase%:*}
        line=$(grep -E "^$phase, " "$log" | head -n1)
        [[ -n $line ]] || die "no $phase line in $log (has baton bench's wording changed?)"
        printf '    %s\n' "$line" >&2
        got[$key]=$(grab "$log" "^$phase, .* -> \\([0-9.]*\\) runs\\/s.*" "$phase rate")
        got[cpu_$key]=$(sed -n "s/^$phase, .* = \\([0-9]*\\) µs CPU\\/run.*/\\1/p" "$log" | head -n1)
        got[pg_cores_$key]=$(sed -n "s/^$phase, .*PostgreSQL \\([0-9.]*\\),.*/\\1/p" "$log" | head -n1)
        got[own_cores_$key]=$(sed -n "s/^$phase, .*replicas \\([0-9.]*\\),.*/\\1/p" "$log" | head -n1)
    done
}

bench_graphile_scale() {
    step "graphile-worker: $2 jobs, $3 process(es) of concurrency $concurrency, localQueue $local_queue"
    run_graphile "$1" --jobs "$2" --batches "$plans" --processes "$3"
}

# One round of the scale curve: every size and count, the side going
# first alternating from one bench to the next and between rounds.
run_scale_round() {
    local round=$1 n procs side turn=$1
    local -a sides
    for n in ${scale_jobs//,/ }; do
        for procs in ${scale_processes//,/ }; do
            if ((turn++ % 2)); then sides=(graphile baton); else sides=(baton graphile); fi
            for side in "${sides[@]}"; do
                sleep "$settle"
                "bench_${side}_scale" "$run_dir/round-$round-$n-$procs-$side.log" "$n" "$procs"
                record "$side" "$n/$procs/$round"
            done
        done
    done
}

run_phases_round() {
    local round=$1 side sides
    # Odd rounds graphile first, even rounds Baton first.
    if ((round % 2)); then sides=(graphile baton); else sides=(baton graphile); fi
    for side in "${sides[@]}"; do
        sleep "$settle"
        "bench_$side" "$run_dir/round-$round-$side.log"
        record "$side" "$round"
    done
}

# ---- the table ----

# One row per metric and side, then the ratio: key|label|printf format.
# (The scale curve files its results under "SIZE/PROCESSES/ROUND" instead
# of the round, and prints its own table: print_scale_table.)
METRICS=(
    "full_queue|full queue burn-down, runs/s (higher is better)|%.0f"
    "end_to_end|end to end, added while working, runs/s (higher is better)|%.0f"
    "p50|pickup latency p50, ms (lower is better)|%.2f"
    "p95|pickup latency p95, ms (lower is better)|%.2f"
    "cpu_full_queue|full queue, machine µs CPU per run (lower is better)|%.0f"
    "cpu_end_to_end|end to end, machine µs CPU per run (lower is better)|%.0f"
)

# Reads numbers, one per line; prints "median min max" (nothing if none).
stats() {
    sort -g | awk '{ v[NR] = $1 }
        END {
            if (NR == 0) exit
            m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            print m, v[1], v[NR]
        }'
}

# num FORMAT VALUE: VALUE printed with a METRICS format, "-" if empty.
num() {
    if [[ -z $2 ]]; then printf -- -; return; fi
    # shellcheck disable=SC2059 # the format comes from METRICS
    LC_NUMERIC=C printf "$1" "$2"
}

# row LABEL FORMAT VALUES...: the values, then their median and min-max.
row() {
    local label=$1 fmt=$2 v med="" lo="" hi=""
    shift 2
    printf '  %-9s' "$label"
    for v in "$@"; do printf ' %9s' "$(num "$fmt" "$v")"; done
    read -r med lo hi < <(printf '%s\n' "$@" | grep . | stats) || true
    if [[ -n $med ]]; then
        printf ' %9s  %s-%s' "$(num "$fmt" "$med")" "$(num "$fmt" "$lo")" "$(num "$fmt" "$hi")"
    fi
    printf '\n'
}

print_phases_table() {
    local spec key label fmt r b g side
    local -a values ratios
    printf '\n%-11s' ""
    for ((r = 1; r <= rounds; r++)); do printf ' %9s' "round $r"; done
    printf ' %9s  %s\n' median min-max
    for spec in "${METRICS[@]}"; do
        IFS='|' read -r key label fmt <<<"$spec"
        printf '%s\n' "$label"
        for side in baton graphile; do
            values=()
            for ((r = 1; r <= rounds; r++)); do values+=("${result[$side:$key:$r]:-}"); done
            row "$side" "$fmt" "${values[@]}"
        done
        ratios=()
        for ((r = 1; r <= rounds; r++)); do
            b=${result[baton:$key:$r]:-} g=${result[graphile:$key:$r]:-}
            if [[ -n $b && -n $g ]] && awk -v g="$g" 'BEGIN { exit !(g > 0) }'; then
                ratios+=("$(awk -v b="$b" -v g="$g" 'BEGIN { printf "%.4f", b / g }')")
            else
                ratios+=("")
            fi
        done
        row "ratio B/g" "%.2f" "${ratios[@]}"
    done
}

# The scale curve's tables, one per phase: per queue size and process
# count, the median over the rounds of each side's figure, and of the
# per-round ratio with its min-max.
print_scale_table() {
    local phase title n procs key r b g med lo hi fmt w
    local -a bs gs ratios
    for phase in end_to_end full_queue; do
        if [[ $phase == end_to_end ]]; then
            title="end to end: runs/jobs added by one client while the processes work"
        else
            title="full queue: every run/job added before the processes start"
        fi
        printf '\n%s\n' "$title"
        printf '%-14s | %-35s | %-35s | %-13s | %s\n' "" \
            "runs (jobs) per second" "µs CPU per run, machine" "PG cores" "worker cores"
        printf '%-8s %5s | %8s %8s %17s | %8s %8s %17s | %6s %6s | %6s %6s\n' queue procs \
            Baton graphile "B/g (range)" Baton graphile "B/g (range)" Baton graph. Baton graph.
        for n in ${scale_jobs//,/ }; do
            for procs in ${scale_processes//,/ }; do
                printf '%-8s %5s' "$n" "$procs"
                for key in "$phase" "cpu_$phase" "pg_cores_$phase" "own_cores_$phase"; do
                    bs=() gs=() ratios=()
                    for ((r = 1; r <= rounds; r++)); do
                        b=${result[baton:$key:$n/$procs/$r]:-} g=${result[graphile:$key:$n/$procs/$r]:-}
                        bs+=("$b") gs+=("$g")
                        if [[ $b =~ ^[0-9.]+$ && $g =~ ^[0-9.]+$ ]] && awk -v g="$g" 'BEGIN { exit !(g > 0) }'; then
                            ratios+=("$(awk -v b="$b" -v g="$g" 'BEGIN { printf "%.4f", b / g }')")
                        fi
                    done
                    if [[ $key == *cores* ]]; then fmt=%.2f w=6; else fmt=%.0f w=8; fi
                    printf ' |'
                    read -r med _ < <(printf '%s\n' "${bs[@]}" | grep -E '^[0-9.]+$' | stats) || med=""
                    printf ' %*s' "$w" "$(num "$fmt" "$med")"
                    read -r med _ < <(printf '%s\n' "${gs[@]}" | grep -E '^[0-9.]+$' | stats) || med=""
                    printf ' %*s' "$w" "$(num "$fmt" "$med")"
                    if [[ $key != *cores* ]]; then
                        med=""
                        read -r med lo hi < <(printf '%s\n' "${ratios[@]}" | grep . | stats) || med=""
                        if [[ -n $med ]]; then
                            printf ' %17s' "$(num %.2f "$med") ($(num %.2f "$lo")-$(num %.2f "$hi"))"
                        else
                            printf ' %17s' -
                        fi
                    fi
                done
                printf '\n'
            done
        done
    done
    printf '%s\n' "Medians over the rounds; B/g: the median and range of the per-round ratios." \
        "Cores: CPU of PostgreSQL's and of the worker processes over the timed window."
}

# The tables' first lines: the builds and the settings.
versions() {
    printf '\n%s / graphile-worker %s (Node %s): ' \
        "$("$BATON_BIN" --version 2>/dev/null || echo "$BATON_BIN")" "$GRAPHILE_VERSION" "$NODE_VERSION"
}

phases_header() {
    versions
    printf '%s round%s, %s runs per phase, %s latency samples, full queue after a warm-up of %s\n' \
        "$rounds" "$( ((rounds == 1)) || echo s)" "$jobs" "$samples" "$warm_up"
    sed -n 's/^baton bench: /Baton: /p' "$run_dir/round-1-baton.log"
    sed -n 's/^graphile-worker: /graphile: /p' "$run_dir/round-1-graphile.log"
}

scale_header() {
    versions
    printf 'scale curve, %s round%s; Baton: %s plans, %s targets%s; graphile: concurrency %s, localQueue %s per process\n' \
        "$rounds" "$( ((rounds == 1)) || echo s)" "$plans" "$targets" \
        "${baton_extra[*]:+, ${baton_extra[*]}}" "$concurrency" "$local_queue"
}

# ---- main ----

cleanup() {
    local rc=$?
    trap - EXIT
    # A killed Node leaves its scratch databases; so may an error.
    if ((rc != 0)) && [[ -n ${PG_URL:-} && -x $NODE && -f $GRAPHILE_JS ]]; then
        "$NODE" "$GRAPHILE_JS" --url "$PG_URL" --db "$GRAPHILE_DB" --drop >/dev/null 2>&1 || true
    fi
    stop_postgres
    exit "$rc"
}

parse_args "$@"
check_args
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ensure_postgres BATON_PEERS_DATABASE_URL
ensure_graphile
write_graphile_js
ensure_baton

run_dir="$PEERS_DIR/runs/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run_dir"
if ((scale)); then
    what="Scale curve: $rounds round(s) of queues of $scale_jobs by $scale_processes processes"
    mode=scale
else
    what="$rounds round(s) of $jobs runs each"
    mode=phases
fi
step "$what; logs in $run_dir"
for ((round = 1; round <= rounds; round++)); do
    step "Round $round of $rounds"
    "run_${mode}_round" "$round"
done
{
    "${mode}_header"
    "print_${mode}_table"
} | tee "$run_dir/table.txt"
step "Done in $((SECONDS / 60))m $((SECONDS % 60))s; the table is also in $run_dir/table.txt"
