#!/usr/bin/env bash
# Builds the dashboard's browser side: the app crate compiled to wasm with
# the `hydrate` feature, post-processed by wasm-bindgen, plus public/.
#
#   scripts/build-site.sh            -> target/site          (debug)
#   scripts/build-site.sh --release  -> target/site-release  (release)
#
# A bundle only hydrates pages rendered by a server of the same profile, so
# each profile gets its own site root; point BATON_SITE_ROOT at the one that
# matches the server binary.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$BATON_ROOT"

release=0
case ${1:-} in
    --release) release=1 ;;
    "") ;;
    *) die "usage: scripts/build-site.sh [--release]" ;;
esac

if ((release)); then
    baton_setup --release
    profile=wasm-release
    site="$BATON_ROOT/target/site-release"
else
    baton_setup
    profile=dev
    site="$BATON_ROOT/target/site"
    export RUSTFLAGS="$BATON_DEBUG_RUSTFLAGS"
fi
# The wasm build has its own target dir so it never waits for, or
# invalidates, the server's.
target_dir="$BATON_ROOT/target/wasm"
wasm="$target_dir/wasm32-unknown-unknown/$([[ $profile == dev ]] && echo debug || echo "$profile")/app.wasm"

step "Compiling the app to wasm ($profile)"
cargo build -p app --lib --target wasm32-unknown-unknown \
    --no-default-features --features hydrate \
    --profile "$profile" --target-dir "$target_dir"

# Skip wasm-bindgen and wasm-opt when their input has not changed.
stamp="$(sha256sum "$wasm" | cut -d' ' -f1) $(wasm-bindgen --version) $profile"
if [[ -f $site/pkg/.stamp && $(cat "$site/pkg/.stamp") == "$stamp" ]]; then
    step "Bundle in $site/pkg is up to date"
else
    step "Generating the JS bindings"
    rm -rf "$site/pkg.new"
    mkdir -p "$site"
    wasm-bindgen --target web --no-typescript --out-name baton \
        --out-dir "$site/pkg.new" "$wasm"
    # Leptos (built with LEPTOS_OUTPUT_NAME) asks for pkg/baton.wasm.
    if ((release)); then
        step "Optimising the bundle with wasm-opt"
        "$WASM_OPT" -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
            -o "$site/pkg.new/baton.wasm" "$site/pkg.new/baton_bg.wasm"
        rm "$site/pkg.new/baton_bg.wasm"
    else
        mv "$site/pkg.new/baton_bg.wasm" "$site/pkg.new/baton.wasm"
    fi
    printf '%s\n' "$stamp" >"$site/pkg.new/.stamp"
    # Swap whole directories so a running server never serves a mix.
    rm -rf "$site/pkg.old"
    if [[ -d $site/pkg ]]; then mv "$site/pkg" "$site/pkg.old"; fi
    mv "$site/pkg.new" "$site/pkg"
    rm -rf "$site/pkg.old"
fi

cp -R "$BATON_ROOT/public/." "$site/"
step "Site ready: $site ($(du -h "$site/pkg/baton.wasm" | cut -f1) of wasm)"
