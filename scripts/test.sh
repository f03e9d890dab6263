#!/usr/bin/env bash
# Runs every test: unit, engine, and black-box tests of the real binaries against moto on
# loopback. Installs moto (pinned, in .venv) on first use.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
INFRAFLOW_MOTO_SERVER="$(scripts/moto.sh install)"
export INFRAFLOW_MOTO_SERVER
# One build, then the tests from it; two test binaries at a time suit 2 cores.
cargo build --workspace --all-targets
cargo test --workspace -- --test-threads=2 "$@"
