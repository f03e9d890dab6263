#!/usr/bin/env bash
# Runs provision-infra, create-cluster and teardown against moto through the test proxy with a
# fixed delay on every AWS call (INFRAFLOW_BENCH_DELAY_MS, default 150), and prints calls,
# mutating calls, wall time and wall / (calls x delay): the table BENCHMARKS.md records; and a
# provision and teardown with the default pacing (the tests run unpaced): what pacing costs a
# lone cluster, as paced wall / unpaced wall.
# INFRAFLOW_TEST_STRICT=1 runs it under the strict-AWS proxy; INFRAFLOW_BENCH_VERBOSE=1 lists
# the calls; INFRAFLOW_BENCH_BASELINE=/path/to/another/infraflow measures that build too, in the
# same run (build an earlier commit in a worktree with its own CARGO_TARGET_DIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
INFRAFLOW_MOTO_SERVER="$(scripts/moto.sh install)"
export INFRAFLOW_MOTO_SERVER
cargo test -p infraflow-cmd --test latency_bench -- --ignored --nocapture 2>&1 | grep -E '^(delay|default pacing|lease:|check:|quota:|\||  )'
