#!/usr/bin/env bash
# A daemon at scale, with canary workflows (no AWS): RSS with 10,000 submitted workflows waiting,
# and the seconds a daemon restarted after kill -9 takes to lease and resume 1,000 in-flight
# ones. Prints the table BENCHMARKS.md records. Nothing is asserted: these are measurements.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo test -p infraflow-cmd --test daemon_scale_bench -- --ignored --nocapture 2>&1 | grep -E '^\|'
