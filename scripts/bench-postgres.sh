#!/usr/bin/env bash
# infraflow's journal on PostgreSQL beside DBOS Transact on the same server, in one run: a
# throwaway PostgreSQL 15 (fsync on), its raw commit ceiling from pgbench (single-row INSERT, 1 and
# 16 clients), `infraflow bench --db postgres://...` (release build: (a) sequential steps of one
# workflow, (b) 100 workflows x 20 steps), and DBOS Transact 3.4 (scripts/bench_dbos.py, in
# .venv-dbos) with the same two shapes. Prints the table of BENCHMARKS.md.
#   scripts/bench-postgres.sh [ROUNDS]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
rounds="${1:-3}"
seconds=10

cargo build --release -q -p infraflow-cmd
venv="$root/.venv-dbos"
if ! "$venv/bin/python" -c "import dbos" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "dbos==3.4.*"
fi

read -r _pid port dir _url < <(scripts/postgres.sh start)
trap 'scripts/postgres.sh stop "$dir"' EXIT
PGPASSWORD="$(cat "$dir/password")"
export PGPASSWORD
url="postgres://infraflow@127.0.0.1:$port/postgres"

psql -q "$url" -c "CREATE TABLE ceiling (id BIGSERIAL PRIMARY KEY, at BIGINT NOT NULL, data TEXT NOT NULL)"
echo "INSERT INTO ceiling (at, data) VALUES (1, '{\"type\":\"step_completed\"}');" >"$dir/insert.sql"
tps() { pgbench -n -f "$dir/insert.sql" -c "$1" -j "$2" -T "$seconds" "$url" 2>/dev/null | awk '/^tps/ {print $3}'; }
c1="$(tps 1 1)"
c16="$(tps 16 2)"
echo "pgbench: 1 client $c1 tx/s, 16 clients $c16 tx/s" >&2

infraflow="$(target/release/infraflow --db "$url" bench --rounds "$rounds" --json)"
dbos="$("$venv/bin/python" scripts/bench_dbos.py "postgresql://infraflow:$PGPASSWORD@127.0.0.1:$port/postgres" 1000 "$rounds")"

python3 - "$c1" "$c16" "$infraflow" "$dbos" <<'PY'
import json, sys
c1, c16 = float(sys.argv[1]), float(sys.argv[2])
i, d = json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(f"PostgreSQL 15, fsync on; pgbench single-row INSERT: 1 client {c1:.0f} tx/s, 16 clients {c16:.0f} tx/s")
print(f"| | (a) 1 workflow, sequential steps/s | (a) / 1-client ceiling | (b) 100 x 20 steps/s | (b) / 16-client ceiling |")
print(f"|---|---|---|---|---|")
for name, a, b in [("infraflow (PostgreSQL journal)", i["sequentialStepsPerSec"], i["concurrentStepsPerSec"]),
                   (f"DBOS Transact {d['dbosVersion']}", d["sequentialStepsPerSec"], d["concurrentStepsPerSec"])]:
    print(f"| {name} | {a:.0f} | {a / c1:.2f} | {b:.0f} | {b / c16:.2f} |")
print(f"infraflow's own ceiling in the same run: 1 client {i['rawInsertTxPerSec1Client']:.0f}, 16 clients {i['rawInsertTxPerSec16Clients']:.0f} tx/s")
PY
