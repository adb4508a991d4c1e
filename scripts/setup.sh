#!/usr/bin/env bash
# Installs what building and testing Baton needs, skipping whatever is
# already in place, so a second run takes a second.
#
#   scripts/setup.sh [--release] [--e2e]
#
#   (always)   the wasm32 target and the wasm-bindgen CLI matching Cargo.lock
#   --release  wasm-opt (npm binaryen; Debian's is too old, see BUILD.md)
#   --e2e      the Playwright packages in end2end/ and Debian's Chromium
#
# The other scripts source this file for its helpers and shared settings.
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

baton_setup() {
    local release=0 e2e=0 arg
    for arg in "$@"; do
        case $arg in
            --release) release=1 ;;
            --e2e) e2e=1 ;;
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
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    baton_setup "$@"
    step "Setup complete"
fi
