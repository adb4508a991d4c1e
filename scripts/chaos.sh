#!/usr/bin/env bash
# One chaos schedule (server/tests/chaos): real `baton serve` processes,
# seeded random faults while plans arrive, then every invariant checked
# from the event history, the executions the commands recorded and the
# webhooks received. Prints the faults by kind, runs, executions and the
# seed; a violation fails with the seed and the history that breaks it.
#
#   scripts/chaos.sh [--mode postgres|sqlite] [--duration 2m] [--seed N]
#
# postgres (default): three replicas on a PostgreSQL cluster of its own
# (initdb/pg_ctl, installed by scripts/test.sh), each behind a proxy that
# partitions, delays and resets; sqlite: one replica on a file.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$BATON_ROOT"

mode=postgres
duration=2m
seed=""
while (($#)); do
    case $1 in
        --mode) mode=${2:?--mode needs postgres or sqlite}; shift 2 ;;
        --duration) duration=${2:?--duration needs a time, e.g. 30m}; shift 2 ;;
        --seed) seed=${2:?--seed needs a number}; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[[ $mode == postgres || $mode == sqlite ]] || die "--mode is postgres or sqlite, not $mode"
[[ -z $seed || $seed =~ ^[0-9]+$ ]] || die "--seed is a number, not $seed"
if [[ $mode == postgres ]] && ! command -v initdb >/dev/null &&
    ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
    die "PostgreSQL's initdb is not installed (scripts/test.sh installs it)"
fi

# The "clock skew" fault starts replicas under libfaketime.
if [[ $mode == postgres ]]; then ensure_libfaketime; fi

export CHAOS_DURATION=$duration
if [[ -n $seed ]]; then export CHAOS_SEED=$seed; fi
export RUSTFLAGS="$BATON_DEBUG_RUSTFLAGS"
step "Chaos: $mode for $duration${seed:+, seed $seed}"
cargo test -p server --test chaos -- --exact "chaos_${mode}_random_seed" --nocapture
