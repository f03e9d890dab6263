#!/usr/bin/env bash
# The AWS emulator the tests and the demo run against: moto's standalone server, pinned, in a
# virtualenv inside the repo (.venv, git-ignored).
#   scripts/moto.sh install   create the virtualenv if needed; prints the path of the server to start
#                             (scripts/moto-server: moto_server less its per-request logging)
#   scripts/moto.sh start     start moto on a free 127.0.0.1 port; prints "PID PORT"
set -euo pipefail
MOTO_VERSION="5.2.5"
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${INFRAFLOW_VENV:-$root/.venv}"
server="$venv/bin/moto_server"
launcher="$root/scripts/moto-server"

install() {
  if [ -x "$server" ] && "$venv/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; then
    echo "$launcher"
    return
  fi
  echo "installing moto[server]==$MOTO_VERSION into $venv ..." >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" >&2
  echo "$launcher"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
  install >/dev/null
  port="$(free_port)"
  # Only the image the demo launches: moto's 1,300 default images of us-east-1 each come with a
  # snapshot, and every filtered DescribeSnapshots scans them all.
  MOTO_AMIS_PATH="$root/tests/fixtures/moto-amis.json" "$launcher" -H 127.0.0.1 -p "$port" >"${TMPDIR:-/tmp}/infraflow-moto-$port.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/')" 2>/dev/null; then
      echo "$pid $port"
      return
    fi
    sleep 0.1
  done
  echo "moto did not start on 127.0.0.1:$port; see ${TMPDIR:-/tmp}/infraflow-moto-$port.log" >&2
  kill "$pid" 2>/dev/null || true
  exit 1
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  *) echo "usage: scripts/moto.sh install|start" >&2; exit 2 ;;
esac
