#!/usr/bin/env bash
# A throwaway PostgreSQL 15 for the tests, the benchmark and trying several daemons by hand, like
# scripts/moto.sh for the AWS emulator: initdb into a fresh temp dir, a free port, fsync on.
#   scripts/postgres.sh install              make sure PostgreSQL 15's server is installed (apt)
#   scripts/postgres.sh start [--host ADDR] [--tls]  start one; prints "PID PORT DATADIR URL"
#                                            (--tls: TLS on, its CA in DATADIR/tls/ca.crt)
#   scripts/postgres.sh stop DATADIR         stop it and remove its files
# The URL carries no password: the server's user `infraflow` has the password in DATADIR/password
# (mode 0600), which clients pass in PGPASSWORD. As root, the server runs as the unprivileged user
# `nobody` (PostgreSQL refuses to run as root).
set -euo pipefail
bindir="${INFRAFLOW_PG_BINDIR:-/usr/lib/postgresql/15/bin}"

install() {
  if [ ! -x "$bindir/postgres" ]; then
    echo "installing postgresql-15 from Debian's packages ..." >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >&2
  fi
  echo "$bindir"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

as_server() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u nobody -- "$@"
  else
    "$@"
  fi
}

# A test CA and a server certificate for `host` (and localhost) in DIR/tls: ca.crt is what
# clients trust (sslrootcert); the server's key is readable by the server's user only.
make_tls() {
  local dir="$1" host="$2" t="$1/tls"
  INFRAFLOW_PG_TLS_IPS="${INFRAFLOW_PG_TLS_IPS:-}"
  mkdir -p "$t"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$t/ca.key" -out "$t/ca.crt" -days 2 \
    -subj "/CN=infraflow test CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -keyout "$t/server.key" -out "$t/server.csr" -subj "/CN=localhost" >/dev/null 2>&1
  # More addresses the clients use (other hosts' view of this one): INFRAFLOW_PG_TLS_IPS=a,b.
  local sans="DNS:localhost,IP:$host" ip
  for ip in ${INFRAFLOW_PG_TLS_IPS//,/ }; do sans="$sans,IP:$ip"; done
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
    "$sans" >"$t/server.ext"
  openssl x509 -req -in "$t/server.csr" -CA "$t/ca.crt" -CAkey "$t/ca.key" -CAcreateserial -out "$t/server.crt" \
    -days 2 -extfile "$t/server.ext" >/dev/null 2>&1
  chmod 0600 "$t/server.key"
  if [ "$(id -u)" = 0 ]; then chown nobody "$t/server.key" "$t/server.crt"; fi
}

start() {
  local host=127.0.0.1 tls=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --host) host="$2"; shift 2 ;;
      --tls) tls=1; shift ;;
      *) echo "start: unknown option $1" >&2; exit 2 ;;
    esac
  done
  install >/dev/null
  local dir port password
  dir="$(mktemp -d "${TMPDIR:-/tmp}/infraflow-pg.XXXXXX")"
  chmod 0755 "$dir"
  password="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
  (umask 077; echo "$password" >"$dir/password")
  mkdir "$dir/data"
  if [ "$(id -u)" = 0 ]; then chown nobody "$dir/data" "$dir"; cp "$dir/password" "$dir/pwfile"; chown nobody "$dir/pwfile"; else cp "$dir/password" "$dir/pwfile"; fi
  as_server "$bindir/initdb" -D "$dir/data" -U infraflow --pwfile="$dir/pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    exit 1
  }
  rm -f "$dir/pwfile"
  echo "host all all 0.0.0.0/0 scram-sha-256" >>"$dir/data/pg_hba.conf"
  port="$(free_port)"
  local ssl=""
  if [ -n "$tls" ]; then
    make_tls "$dir" "$host"
    ssl="-c ssl=on -c ssl_cert_file=$dir/tls/server.crt -c ssl_key_file=$dir/tls/server.key"
    # TCP only over TLS: a client that connects at all proves it spoke TLS.
    { echo "hostnossl all all all reject"; cat "$dir/data/pg_hba.conf"; } >"$dir/hba" && mv "$dir/hba" "$dir/data/pg_hba.conf"
    if [ "$(id -u)" = 0 ]; then chown nobody "$dir/data/pg_hba.conf"; fi
  fi
  as_server "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-c listen_addresses=$host -c port=$port -c unix_socket_directories=$dir -c fsync=on -c max_connections=200 $ssl" \
    start >/dev/null || {
    cat "$dir/server.log" >&2
    exit 1
  }
  local pid
  pid="$(head -1 "$dir/data/postmaster.pid")"
  echo "$pid $port $dir postgres://infraflow@$host:$port/postgres"
}

stop() {
  local dir="$1"
  [ -d "$dir/data" ] || { echo "no PostgreSQL data directory in $dir" >&2; exit 2; }
  as_server "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}

case "${1:-}" in
  install) install ;;
  start) shift; start "$@" ;;
  stop) stop "$2" ;;
  *) echo "usage: scripts/postgres.sh install|start [--host ADDR] [--tls]|stop DATADIR" >&2; exit 2 ;;
esac
