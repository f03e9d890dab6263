#!/usr/bin/env bash
# A CI account's fleet: N (INFRAFLOW_FLEET_N, default 12) 3-zone create-clusters submitted at
# once to one daemon, then their N teardowns, through the test proxy answering like AWS's
# account-wide request buckets as AWS documents them (EC2 per API: mutating 50 burst / 5 per s,
# describe 100 / 20; Route53 5 / 5; ELB 20 / 10). Prints, per phase, the wall time, the buckets' floor for the requests they
# admitted, and the throttled requests: the table BENCHMARKS.md records. A phase is timed from its
# first submit (the submits' checks draw on the same buckets); each class's admitted requests a
# second are printed too (INFRAFLOW_BENCH_PER_API=1: each API's), to show where a class idled.
# INFRAFLOW_BENCH_BASELINE=/path/to/another/infraflow measures that build too, in the same run
# (build an earlier commit in a worktree with its own CARGO_TARGET_DIR). INFRAFLOW_BENCH_LOGS=<folder>
# keeps each phase's daemon log there (each step's duration) and prints how long the submits took. A second benchmark puts
# half of N in a second account (roleARN) against N/2 alone: each account has its own buckets.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
INFRAFLOW_MOTO_SERVER="$(scripts/moto.sh install)"
export INFRAFLOW_MOTO_SERVER
cargo test -p infraflow-cmd --test fleet_bench -- --ignored --nocapture --test-threads=1 2>&1 | grep -E '^(\||[0-9]+ x )'
