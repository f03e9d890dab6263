#!/usr/bin/env bash
# Runs every test: unit, engine, the journal's conformance suite on SQLite and on PostgreSQL, and
# black-box tests of the real binaries against moto on loopback (and, for several hosts, in
# network namespaces). Installs moto (pinned, in .venv) and PostgreSQL 15 (Debian) on first use.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
INFRAFLOW_MOTO_SERVER="$(scripts/moto.sh install)"
export INFRAFLOW_MOTO_SERVER
scripts/postgres.sh install >/dev/null
# One build, then the tests from it; two test binaries at a time suit 2 cores.
cargo build --workspace --all-targets
if [ "$#" -eq 0 ]; then
  cargo test --workspace --no-fail-fast -- --test-threads=2 --skip several_hosts
  # Daemons on three hosts (network namespaces) sharing PostgreSQL, one test at a time, with the
  # figures they print: takeover time after kill -9, steps run twice.
  cargo test -p infraflow-cmd --test multi_host -- --test-threads=1 --show-output
else
  cargo test --workspace -- --test-threads=2 "$@"
fi
# The AWS suites again under AWS's contract rather than moto's: every proxy the tests start
# remembers idempotency tokens, hides new ids for a moment (eventual consistency), lists an
# opted-in Local Zone, and holds Route53 to its tag and rate limits (tests/support/strict.rs).
# Tests that set their own lag on their proxy already ran under it above, and are not run twice.
if [ "$#" -eq 0 ]; then
  INFRAFLOW_TEST_STRICT=1 cargo test -p infraflow-cmd --test aws_provision --test aws_teardown --test aws_privatelink \
    --test aws_nodepool --test operator_sequences --test multi_host -- --test-threads=2 \
    --skip consistency_lag --skip follow_up_call_fails --skip subnet_was_made_under_lag --skip long_tag_lag
fi
