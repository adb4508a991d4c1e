#!/usr/bin/env bash
# Runs every test: the Rust unit and integration tests (SQLite and
# PostgreSQL backends), then the browser tests against a debug server.
#
#   scripts/test.sh
#
# PostgreSQL: BATON_TEST_DATABASE_URL if set, else a server on
# 127.0.0.1:5432, else a throw-away cluster under target/pg (installing
# Debian's postgresql first if needed). Tests create their own databases.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$BATON_ROOT"

PG_PORT=55432
PG_DIR="$BATON_ROOT/target/pg"
pg_bin=""
pg_started=0

on_exit() {
    local rc=$?
    if ((pg_started)); then
        as_pg "$pg_bin/pg_ctl" -D "$PG_DIR" -m fast stop >/dev/null || true
    fi
    if ((rc == 0)); then
        step "All tests passed in $((SECONDS / 60))m $((SECONDS % 60))s"
    else
        step "FAILED (exit $rc) after $((SECONDS / 60))m $((SECONDS % 60))s"
    fi
}
trap on_exit EXIT

# initdb and pg_ctl refuse to run as root.
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

find_pg_bin() {
    if command -v initdb >/dev/null; then
        dirname "$(readlink -f "$(command -v initdb)")"
    else
        find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n1
    fi
}

ensure_postgres() {
    if [[ -n ${BATON_TEST_DATABASE_URL:-} ]]; then
        step "PostgreSQL: using BATON_TEST_DATABASE_URL"
        return
    fi
    if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
        export BATON_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres"
        step "PostgreSQL: using the server on 127.0.0.1:5432"
        return
    fi
    pg_bin=$(find_pg_bin)
    if [[ -z $pg_bin ]]; then
        step "Installing PostgreSQL (Debian package)"
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
        pg_bin=$(find_pg_bin)
        [[ -n $pg_bin ]] || die "postgresql installed but initdb not found"
    fi
    if ! pg_isready -q -h 127.0.0.1 -p "$PG_PORT" 2>/dev/null; then
        if [[ ! -f $PG_DIR/PG_VERSION ]]; then
            step "Creating a throw-away PostgreSQL cluster in $PG_DIR"
            rm -rf "$PG_DIR"
            mkdir -p "$PG_DIR"
            if [[ $(id -u) -eq 0 ]]; then chown postgres: "$PG_DIR"; fi
            as_pg "$pg_bin/initdb" -D "$PG_DIR" -U postgres -A trust --no-sync >/dev/null
        fi
        step "Starting it on 127.0.0.1:$PG_PORT"
        as_pg "$pg_bin/pg_ctl" -D "$PG_DIR" -l "$PG_DIR/server.log" -w \
            -o "-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
        pg_started=1
    fi
    export BATON_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
}

ensure_postgres
baton_setup --e2e

# One set of flags for the tests, the dev server and the debug bundle, so
# nothing is compiled twice.
export RUSTFLAGS="$BATON_DEBUG_RUSTFLAGS"

step "Rust tests"
cargo test --workspace

scripts/build-site.sh
step "Compiling the server (debug)"
# --workspace resolves features exactly as `cargo test --workspace` did,
# so the binary reuses the test build's artifacts.
cargo build --workspace --bin baton

step "Browser tests"
(cd end2end && npx --no-install playwright test)
