#!/usr/bin/env bash
# Builds Baton in release mode and starts it: SQLite under ./data/, the
# dashboard at http://127.0.0.1:3000. Arguments go to `baton serve`.
#
#   scripts/run.sh [serve options...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$BATON_ROOT"

baton_setup --release
scripts/build-site.sh --release
step "Compiling the server (release)"
cargo build --release -p server --bin baton

step "Starting baton serve"
exec target/release/baton serve "$@"
