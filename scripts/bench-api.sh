#!/usr/bin/env bash
# Submits per second through the daemon's API against through the journal, in one run, on one
# SQLite journal with one daemon running what is submitted (canaries: no AWS). Three ways of
# submitting N canaries: `infraflow submit` (the journal path, a process each), `infraflow
# --server … submit` (the API through the CLI, a process each), and one HTTP client keeping its
# connection (the API as a service calls it). Prints a table; nothing is asserted.
# Usage: scripts/bench-api.sh [N]   (default 200)
set -euo pipefail
n=${1:-200}
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo build --quiet --bin infraflow
bin="$root/target/debug/infraflow"
work=$(mktemp -d)
trap 'kill "$daemon" 2>/dev/null || true; rm -rf "$work"' EXIT
export INFRAFLOW_DB="$work/journal.sqlite3" AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench
export AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export AWS_ENDPOINT_URL=http://127.0.0.1:9   # nothing listens: a canary makes no AWS call
token=bench-token-$RANDOM$RANDOM
printf %s "$token" >"$work/token"
hash=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
cat >"$work/tenants.json" <<JSON
{"tenants": [{"name": "bench", "tokenSha256": ["$hash"], "permission": "submit", "daemonIdentity": true}]}
JSON
echo '{"steps": 1}' >"$work/canary.json"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" daemon --allow-role 'arn:aws:iam::000000000000:role/none' --api-listen "127.0.0.1:$port" \
  --tenants "$work/tenants.json" 2>"$work/daemon.log" &
daemon=$!
for _ in $(seq 100); do grep -q "serving the API" "$work/daemon.log" && break; sleep 0.1; done
rate() { python3 -c "print(f'{$1 / $2:.1f}')"; }
t0=$(date +%s.%N)
for i in $(seq "$n"); do "$bin" submit canary --input "$work/canary.json" --id "j-$i" >/dev/null; done
journal=$(python3 -c "print($(date +%s.%N) - $t0)")
t0=$(date +%s.%N)
for i in $(seq "$n"); do
  "$bin" --server "http://127.0.0.1:$port" --token-file "$work/token" submit canary --input "$work/canary.json" --id "c-$i" >/dev/null
done
cli=$(python3 -c "print($(date +%s.%N) - $t0)")
http=$(python3 - "$port" "$token" "$n" <<'PY'
import http.client, json, sys, time
port, token, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port)
t0 = time.time()
for i in range(n):
    c.request("POST", "/v1/workflows", json.dumps({"workflow": "canary", "input": {"steps": 1}, "id": f"h-{i}"}),
              {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 201, r.status
print(time.time() - t0)
PY
)
echo "| way ($n canaries) | seconds | submits/s | vs the journal path |"
echo "|---|---|---|---|"
echo "| infraflow submit (journal) | $(printf %.2f "$journal") | $(rate "$n" "$journal") | 1.00 |"
echo "| infraflow --server … submit (API) | $(printf %.2f "$cli") | $(rate "$n" "$cli") | $(python3 -c "print(f'{$journal / $cli:.2f}')") |"
echo "| one HTTP connection (API) | $(printf %.2f "$http") | $(rate "$n" "$http") | $(python3 -c "print(f'{$journal / $http:.2f}')") |"
