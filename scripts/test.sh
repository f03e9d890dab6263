#!/usr/bin/env bash
# Runs every test: unit, engine, the journal's conformance suite on SQLite and on PostgreSQL, and
# black-box tests of the real binaries against moto on loopback (and, for several hosts, in
# network namespaces), and the status page in headless Chromium. Installs moto (pinned, in .venv),
# PostgreSQL 15 and Chromium (Debian) on first use.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# The house first (seconds): no two files import each other around a circle (ARCHITECTURE.md's
# invariant), README stays a page, and every doc link lands.
scripts/import-circles
scripts/check-docs
# The Debian packages the tests use, when missing (strace, iproute2, openssl, sqlite3, chromium…).
scripts/test-tools.sh
INFRAFLOW_MOTO_SERVER="$(scripts/moto.sh install)"
export INFRAFLOW_MOTO_SERVER
scripts/postgres.sh install >/dev/null
# One build, then the tests from it (scripts/run-tests.py runs the binaries cargo built, several
# side by side: most of the suite waits on moto, PostgreSQL, leases and kills rather than on the
# cores; it keeps every test's time and prints the ten slowest at the end).
build_started=$SECONDS
cargo build --workspace --all-targets
echo "[test.sh] build: $((SECONDS - build_started)) s"
cargo test --workspace --no-run --message-format=json 2>/dev/null | scripts/run-tests.py list
# A cold build leaves gigabytes of artifacts to write back: flushed now, they do not stall the
# first tests' journal fsyncs (and with them their lease renewals).
sync
rm -f target/test-times.tsv target/test-passes.tsv target/test-counts.tsv target/test-cpu.tsv
jobs="${INFRAFLOW_TEST_JOBS:-2}"
status=0
if [ "$#" -eq 0 ]; then
  # The AWS suites again under AWS's contract rather than moto's: every proxy the tests start
  # remembers idempotency tokens, hides new ids for a moment (eventual consistency), lists an
  # opted-in Local Zone, and holds Route53 to its tag and rate limits (tests/support/strict.rs).
  # Its emulators check each EC2 tag read against moto's own scan (scripts/moto_server.py), so
  # the plain pass's quicker reads are proven to answer the same.
  # Tests that set their own lag on their proxy already ran under it in the plain pass, and are
  # not run twice. Both passes share one queue: the strict pass's first binaries start as the
  # plain pass's last ones end.
  skip_lagged=(--skip consistency_lag --skip follow_up_call_fails --skip subnet_was_made_under_lag --skip long_tag_lag)
  scripts/run-tests.py run --label plain --jobs "$jobs" --first cross_journal,aws_provision,aws_iam,hypershift_adoption,cluster_that_ran,roles,byo_vpc -- --test-threads=2 \
    --skip several_hosts \
    --then --label strict --first aws_provision --env INFRAFLOW_TEST_STRICT=1 --env INFRAFLOW_MOTO_CHECKED=1 \
    --only aws_provision,aws_teardown,aws_privatelink,byo_vpc,one_authority,drift_check,quotas,aws_nodepool,operator_sequences,hypershift_adoption,hypershift_today,aws_iam,cross_journal,janitor,cluster_that_ran,roles,provenance,autonode,iam_drift,management -- \
    --test-threads=2 "${skip_lagged[@]}" --skip every_aws_call || status=1
  # Daemons on three hosts (network namespaces) sharing PostgreSQL, one test at a time and alone
  # on the machine (they measure takeover times), with the figures they print.
  scripts/run-tests.py run --label hosts --only multi_host -- --test-threads=1 --show-output || status=1
  scripts/run-tests.py run --label strict-hosts --env INFRAFLOW_TEST_STRICT=1 --only multi_host -- --test-threads=2 || status=1
else
  scripts/run-tests.py run --label filtered --jobs "$jobs" -- --test-threads=2 "$@" || status=1
fi
scripts/run-tests.py report
exit "$status"
