#!/usr/bin/env bash
# Installs what building and testing Baton needs, skipping whatever is
# already in place, so a second run takes a second.
#
#   scripts/setup.sh [--release] [--e2e] [--faketime]
#
#   (always)   the wasm32 target and the wasm-bindgen CLI matching Cargo.lock
#   --release  wasm-opt (npm binaryen; Debian's is too old, see BUILD.md)
#   --e2e      the Playwright packages in end2end/ and Debian's Chromium
#   --faketime Debian's libfaketime, for the clock-skew tests, and the
#              openssl command, for the HTTPS tests
#
# The other scripts source this file for its helpers and shared settings,
# among them ensure_postgres (scripts/test.sh, scripts/ha-demo.sh).
set -euo pipefail

BATON_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
# Playwright must use /usr/bin/chromium: its own browser download fails here.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

# Flags for every debug build (tests, the dev server, the debug wasm bundle).
# cargo-leptos uses the same: much faster incremental builds. Every script
# sets exactly this, so the builds share their artifacts.
BATON_DEBUG_RUSTFLAGS="--cfg erase_components"
BINARYEN_VERSION="132.0.0"
BATON_TOOLS="$BATON_ROOT/target/tools"
WASM_OPT="$BATON_TOOLS/binaryen/node_modules/.bin/wasm-opt"

step() {
    if [[ -t 2 ]]; then printf '\033[1m==> %s\033[0m\n' "$*" >&2; else printf '==> %s\n' "$*" >&2; fi
}
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

ensure_wasm_target() {
    if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
        step "Adding the wasm32-unknown-unknown target"
        rustup target add wasm32-unknown-unknown
    fi
}

# The CLI must equal the wasm-bindgen crate in Cargo.lock exactly, or the
# bundle fails to load with a schema error.
ensure_wasm_bindgen() {
    local want have
    want=$(awk -F'"' '/^name = "wasm-bindgen"$/ { getline; print $2; exit }' "$BATON_ROOT/Cargo.lock")
    [[ -n $want ]] || die "no wasm-bindgen in Cargo.lock"
    have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
    if [[ $have != "$want" ]]; then
        step "Installing wasm-bindgen-cli $want (was: ${have:-none}; takes ~3 min)"
        # Not --locked: its lockfile pins a crate the registry mirror lacks.
        cargo install wasm-bindgen-cli --version "$want"
    fi
}

ensure_wasm_opt() {
    if ! "$WASM_OPT" --version 2>/dev/null | grep -q "version ${BINARYEN_VERSION%%.*}"; then
        step "Installing wasm-opt from npm binaryen@$BINARYEN_VERSION"
        mkdir -p "$BATON_TOOLS/binaryen"
        npm install --prefix "$BATON_TOOLS/binaryen" --no-audit --no-fund \
            "binaryen@$BINARYEN_VERSION" >&2
    fi
}

ensure_node_modules() {
    local dir="$BATON_ROOT/end2end"
    if [[ ! -f $dir/node_modules/.package-lock.json ||
        $dir/package-lock.json -nt $dir/node_modules/.package-lock.json ]]; then
        step "Installing end2end/ npm packages"
        (cd "$dir" && npm ci --no-audit --no-fund >&2)
    fi
}

ensure_chromium() {
    if [[ ! -x /usr/bin/chromium ]]; then
        step "Installing Chromium (Debian package)"
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
    fi
}

# The clock-skew tests run replicas under libfaketime (docs/design.md,
# "One clock").
ensure_libfaketime() {
    if ! compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null; then
        step "Installing libfaketime (Debian package)"
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libfaketime
    fi
}

# The HTTPS tests make a private CA and a server certificate with the
# openssl command (tests/agents.rs); Baton itself links no OpenSSL.
ensure_openssl_cli() {
    if ! command -v openssl >/dev/null; then
        step "Installing the openssl command (Debian package)"
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl
    fi
}

# ---- PostgreSQL, for the tests and the HA demo ----

# The throw-away cluster, when no server answers on 127.0.0.1:5432.
BATON_PG_PORT=55432
BATON_PG_DIR="$BATON_ROOT/target/pg"
pg_bin=""
pg_started=0

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

# ensure_postgres VAR: makes sure a PostgreSQL answers and sets PG_URL to
# a URL of its `postgres` database: $VAR if that variable is set (not
# checked), else the server on 127.0.0.1:5432, else a throw-away cluster
# under target/pg on 127.0.0.1:55432 (installing Debian's postgresql first
# if needed). Sets pg_started=1 when it started that cluster:
# stop_postgres stops it again.
ensure_postgres() {
    local var=$1
    if [[ -n ${!var:-} ]]; then
        step "PostgreSQL: using $var"
        PG_URL=${!var}
        return
    fi
    if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
        PG_URL="postgres://postgres@127.0.0.1:5432/postgres"
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
    if ! pg_isready -q -h 127.0.0.1 -p "$BATON_PG_PORT" 2>/dev/null; then
        if [[ ! -f $BATON_PG_DIR/PG_VERSION ]]; then
            step "Creating a throw-away PostgreSQL cluster in $BATON_PG_DIR"
            rm -rf "$BATON_PG_DIR"
            mkdir -p "$BATON_PG_DIR"
            if [[ $(id -u) -eq 0 ]]; then chown postgres: "$BATON_PG_DIR"; fi
            as_pg "$pg_bin/initdb" -D "$BATON_PG_DIR" -U postgres -A trust --no-sync >/dev/null
        fi
        step "Starting it on 127.0.0.1:$BATON_PG_PORT"
        as_pg "$pg_bin/pg_ctl" -D "$BATON_PG_DIR" -l "$BATON_PG_DIR/server.log" -w \
            -o "-p $BATON_PG_PORT -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
        pg_started=1
    fi
    PG_URL="postgres://postgres@127.0.0.1:$BATON_PG_PORT/postgres"
}

# Stops the throw-away cluster if ensure_postgres started it.
stop_postgres() {
    if ((pg_started)); then
        as_pg "$pg_bin/pg_ctl" -D "$BATON_PG_DIR" -m fast stop >/dev/null || true
        pg_started=0
    fi
}

baton_setup() {
    local release=0 e2e=0 faketime=0 arg
    for arg in "$@"; do
        case $arg in
            --release) release=1 ;;
            --e2e) e2e=1 ;;
            --faketime) faketime=1 ;;
            *) die "setup: unknown option $arg" ;;
        esac
    done
    ensure_wasm_target
    ensure_wasm_bindgen
    if ((release)); then ensure_wasm_opt; fi
    if ((e2e)); then
        ensure_node_modules
        ensure_chromium
    fi
    if ((faketime)); then
        ensure_libfaketime
        ensure_openssl_cli
    fi
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    baton_setup "$@"
    step "Setup complete"
fi
