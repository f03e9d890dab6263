#!/usr/bin/env bash
# The engine benchmark with tracing on (every step and attempt a span, sent by OTLP/HTTP to a
# local sink that answers 200) against off, alternated in one sitting on one binary: the ratio
# of the medians of (a) sequential and (b) concurrent steps per second, on/off, and the median
# of each on-run over the off-run before it (with its quartiles), at the default batch (512
# spans an export) and at 8192. The sink's own CPU time, and the spans sent and dropped, are
# printed too: a figure with spans dropped would not count.
# Usage: scripts/bench-traces.sh [TRIPLES] [BINARY]   (default 10 rounds of three runs,
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
"$py" "$tmp/sink.py" "$tmp/port" &
sink=$!
trap 'kill $sink 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [[ -s $tmp/port ]] && break; sleep 0.1; done
port=$(cat "$tmp/port")
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
dir="$tmp/scratch"
mkdir "$dir"
bench() { "$@" "$bin" bench --dir "$dir" --rounds 5 --json 2>/dev/null | tr -d '\n'; echo; }
on="OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$port"
cpu0=$(cpu $sink)
for _ in $(seq "$pairs"); do
  echo "off $(bench env)"
  echo "on $(bench env "$on")"
  echo "on-big-batches $(bench env "$on" OTEL_BSP_MAX_EXPORT_BATCH_SIZE=8192 OTEL_BSP_MAX_QUEUE_SIZE=65536)"
done >"$tmp/runs"
sink_ticks=$(( $(cpu $sink) - cpu0 ))
"$py" - "$bin" "$pairs" "$sink_ticks" "$tmp/runs" <<'PY'
import collections, json, os, statistics, sys
bin, pairs, ticks, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
by = collections.defaultdict(list)
for line in open(runs):
    name, doc = line.split(" ", 1)
    by[name].append(json.loads(doc))
hz = os.sysconf("SC_CLK_TCK")
dropped = sum(r["traceSpans"]["dropped"] for run in ("on", "on-big-batches") for r in by[run])
sent = sum(r["traceSpans"]["sent"] for run in ("on", "on-big-batches") for r in by[run])
print(f"{bin}, {pairs} triples of 5 rounds (off, on, on with batches of 8192); the sink used "
      f"{ticks / hz:.2f} s of CPU; spans sent {sent:,}, dropped {dropped:,}")
def quartiles(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"{q[1]:.3f} (quartiles {q[0]:.3f}-{q[2]:.3f})"
for key, name in [("sequentialStepsPerSec", "(a) sequential"), ("concurrentStepsPerSec", "(b) concurrent")]:
    off = statistics.median(r[key] for r in by["off"])
    parts = [f"{name}: off {off:,.0f} steps/s"]
    for run, label in [("on", "on"), ("on-big-batches", "on, batches of 8192")]:
        on = statistics.median(r[key] for r in by[run])
        # Each on-run against the off-run just before it: a sitting's drift cancels.
        paired = [r[key] / o[key] for r, o in zip(by[run], by["off"])]
        parts.append(f"{label} {on:,.0f} (medians {on / off:.3f}; paired {quartiles(paired)})")
    print(";  ".join(parts))
PY
