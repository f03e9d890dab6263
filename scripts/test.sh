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
# The AWS suites again under AWS's contract rather than moto's: every proxy the tests start
# remembers idempotency tokens, hides new ids for a moment (eventual consistency), lists an
# opted-in Local Zone, and holds Route53 to its tag and rate limits (tests/support/strict.rs).
if [ "$#" -eq 0 ]; then
  INFRAFLOW_TEST_STRICT=1 cargo test -p infraflow-cmd --test aws_provision --test aws_teardown --test aws_privatelink \
    --test aws_nodepool -- --test-threads=2
fi
