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

on_exit() {
    local rc=$?
    stop_postgres
    if ((rc == 0)); then
        step "All tests passed in $((SECONDS / 60))m $((SECONDS % 60))s"
    else
        step "FAILED (exit $rc) after $((SECONDS / 60))m $((SECONDS % 60))s"
    fi
}
trap on_exit EXIT

# ensure_postgres and stop_postgres are in setup.sh, shared with ha-demo.sh.
ensure_postgres BATON_TEST_DATABASE_URL
export BATON_TEST_DATABASE_URL="$PG_URL"
baton_setup --e2e --faketime

# One set of flags for the tests, the dev server and the debug bundle, so
# nothing is compiled twice.
export RUSTFLAGS="$BATON_DEBUG_RUSTFLAGS"

# The bundle first: the server's build script embeds it, so building it
# after the tests would compile the server a second time.
scripts/build-site.sh

step "Import circles"
# Fast and compiles nothing: a circle between files or folders fails the
# run before the long part does (docs/architecture.md, "The layers").
if ! command -v python3 >/dev/null; then
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-minimal
fi
python3 scripts/import-cycles.py
python3 scripts/import-cycles.py --folders

step "Rust tests"
cargo test --workspace

step "Compiling the server (debug)"
# --workspace resolves features exactly as `cargo test --workspace` did,
# so the binary reuses the test build's artifacts.
cargo build --workspace --bin baton

step "Browser tests"
(cd end2end && npx --no-install playwright test)
