#!/usr/bin/env bash
# Counts the AWS API calls of a 3-zone provision-infra (through a counting proxy in front of
# moto), and of re-running it; the IAM calls of create-iam, again, and of its teardown. Prints
# the tables recorded in BENCHMARKS.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
INFRAFLOW_MOTO_SERVER="$(scripts/moto.sh install)"
export INFRAFLOW_MOTO_SERVER
cargo test -p infraflow-cmd --test api_calls -- --nocapture 2>&1 | grep -E '^(API|  )'
