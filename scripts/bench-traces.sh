#!/usr/bin/env bash
# The engine benchmark with tracing on (every step and attempt a span, sent by OTLP/HTTP to a
# local sink that answers 200) against off, alternated in one sitting on one binary: the ratio
# of the medians of (a) sequential and (b) concurrent steps per second, on/off.
# Usage: scripts/bench-traces.sh [PAIRS] [BINARY]   (default 3 pairs, target/release/infraflow
# if built, else target/debug/infraflow)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
bin=${2:-}
if [[ -z "$bin" ]]; then
  if [[ -x target/release/infraflow ]]; then bin=target/release/infraflow; else bin=target/debug/infraflow; fi
fi
py=.venv/bin/python
[[ -x $py ]] || py=python3
port_file=$(mktemp)
"$py" - "$port_file" <<'PY' &
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
sink=$!
trap 'kill $sink 2>/dev/null; rm -f "$port_file"' EXIT
for _ in $(seq 50); do [[ -s $port_file ]] && break; sleep 0.1; done
port=$(cat "$port_file")
dir=$(mktemp -d)
off=() on=()
for i in $(seq "$pairs"); do
  off+=("$("$bin" bench --dir "$dir" --rounds 3 --json 2>/dev/null | tr -d '\n')")
  on+=("$(OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$port "$bin" bench --dir "$dir" --rounds 3 --json 2>/dev/null | tr -d '\n')")
done
"$py" - "$bin" "${#off[@]}" "${off[@]}" "${on[@]}" <<'PY'
import json, statistics, sys
bin, n = sys.argv[1], int(sys.argv[2])
off = [json.loads(x) for x in sys.argv[3:3 + n]]
on = [json.loads(x) for x in sys.argv[3 + n:]]
for key, name in [("sequentialStepsPerSec", "(a) sequential"), ("concurrentStepsPerSec", "(b) concurrent")]:
    a = statistics.median(r[key] for r in off)
    b = statistics.median(r[key] for r in on)
    print(f"{name}: off {a:,.0f} steps/s, on {b:,.0f} steps/s, on/off {b / a:.3f}   ({bin}, {n} pairs)")
PY
rm -rf "$dir"
