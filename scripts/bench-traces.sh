#!/usr/bin/env bash
# The engine benchmark with tracing on (every step and attempt a span, sent by OTLP/HTTP to a
# local sink that answers 200) against off, alternated in one sitting on one binary: the ratio
# of the medians of (a) sequential and (b) concurrent steps per second, on/off. Two sinks do the
# same (read each request whole, answer 200, connections kept): a Python one and a compiled one
# (scripts/otlp-sink.rs, built here with rustc -O); on two cores a sink's CPU is taken from the
# engine, so each sink's own CPU time is printed too.
# Usage: scripts/bench-traces.sh [PAIRS] [BINARY]   (default 10 rounds of three runs,
# target/release/infraflow if built, else target/debug/infraflow)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-10}
bin=${2:-}
if [[ -z "$bin" ]]; then
  if [[ -x target/release/infraflow ]]; then bin=target/release/infraflow; else bin=target/debug/infraflow; fi
fi
py=.venv/bin/python
[[ -x $py ]] || py=python3
tmp=$(mktemp -d)
# What a collector's receiver does at least: read each request whole, answer 200, on one
# kept-alive connection (a thread each); nothing decoded, so the figure is infraflow's.
cat >"$tmp/sink.py" <<'PY'
import socket, sys, threading
def serve(conn):
    buf = memoryview(bytearray(1 << 20))
    pending = b""
    try:
        while True:
            while b"\r\n\r\n" not in pending:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                pending += chunk
            head, _, rest = pending.partition(b"\r\n\r\n")
            length = next((int(l.split(b":", 1)[1]) for l in head.split(b"\r\n")[1:]
                           if l.split(b":", 1)[0].strip().lower() == b"content-length"), 0)
            left, pending = length - len(rest), rest[length:]
            while left > 0:
                n = conn.recv_into(buf, min(left, len(buf)))
                if n == 0:
                    return
                left -= n
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    finally:
        conn.close()
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
rustc -O scripts/otlp-sink.rs -o "$tmp/otlp-sink"
"$py" "$tmp/sink.py" "$tmp/port" &
sink=$!
"$tmp/otlp-sink" "$tmp/port-rs" &
sink_rs=$!
trap 'kill $sink $sink_rs 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [[ -s $tmp/port && -s $tmp/port-rs ]] && break; sleep 0.1; done
port=$(cat "$tmp/port") port_rs=$(cat "$tmp/port-rs")
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
dir="$tmp/scratch"
mkdir "$dir"
bench() { "$@" "$bin" bench --dir "$dir" --rounds 5 --json 2>/dev/null | tr -d '\n'; echo; }
cpu0=$(cpu $sink) cpu0_rs=$(cpu $sink_rs)
for _ in $(seq "$pairs"); do
  echo "off $(bench env)"
  echo "on $(bench env OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$port)"
  echo "on-compiled-sink $(bench env OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$port_rs)"
done >"$tmp/runs"
sink_ticks=$(( $(cpu $sink) - cpu0 )) sink_rs_ticks=$(( $(cpu $sink_rs) - cpu0_rs ))
"$py" - "$bin" "$pairs" "$sink_ticks" "$sink_rs_ticks" "$tmp/runs" <<'PY'
import collections, json, os, statistics, sys
bin, pairs, ticks, ticks_rs, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
by = collections.defaultdict(list)
for line in open(runs):
    name, doc = line.split(" ", 1)
    by[name].append(json.loads(doc))
hz = os.sysconf("SC_CLK_TCK")
print(f"{bin}, {pairs} triples of 5 rounds; the sinks used {ticks / hz:.2f} s (Python), "
      f"{ticks_rs / hz:.2f} s (compiled) of CPU")
for key, name in [("sequentialStepsPerSec", "(a) sequential"), ("concurrentStepsPerSec", "(b) concurrent")]:
    off = statistics.median(r[key] for r in by["off"])
    parts = [f"{name}: off {off:,.0f} steps/s"]
    for run, label in [("on", "on, Python sink"), ("on-compiled-sink", "on, compiled sink")]:
        on = statistics.median(r[key] for r in by[run])
        parts.append(f"{label} {on:,.0f} ({on / off:.3f})")
    print(";  ".join(parts))
PY
