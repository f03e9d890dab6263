#!/usr/bin/env bash
# The Debian packages the tests use, installed when missing (as root, through apt): strace
# injects the journal stall of the self-fencing test, python3 drives SQLite from a second process
# (and, with python3-venv, holds the emulator), sqlite3 makes a foreign database and reads a
# journal from outside, iproute2 (ip netns) and util-linux (unshare) make the hosts of the
# multi-host tests (and setpriv ties each test moto to its binary), psql reads PostgreSQL back,
# openssl makes the test CAs of the TLS journal and API tests, chromium renders the status page.
set -euo pipefail
missing=""
for pair in strace:strace python3:python3 sqlite3:sqlite3 ip:iproute2 unshare:util-linux runuser:util-linux setpriv:util-linux \
    hostname:hostname sysctl:procps psql:postgresql-client-15 openssl:openssl chromium:chromium; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing="$missing ${pair#*:}"
done
python3 -c 'import ensurepip' >/dev/null 2>&1 || missing="$missing python3-venv"
if [ -n "$missing" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
fi
