#!/usr/bin/env python3
"""Runs test binaries built by cargo, several side by side, and keeps each test's time.

    run-tests.py run --label L [--jobs N] [--only NAME,...] [--first NAME,...] [--env K=V ...] -- LIBTEST_ARGS...
                     [--then --label L2 ... -- LIBTEST_ARGS...]
    run-tests.py report
    cargo test --no-run --message-format=json | run-tests.py list

Passes joined by `--then` share one queue (the second's binaries start as the first's
last ones end; each pass keeps its label, environment and libtest arguments). `run` reads the binaries from `target/test-binaries.tsv` (name, path, package directory; written
by `list` from `cargo test --no-run --message-format=json` on standard input), runs them with libtest's JSON
events (`--format json --report-time`, unstable options that libtest grants at run time when
RUSTC_BOOTSTRAP is set: nothing is compiled differently), at most N at a time, the slowest of the
last run first (`--first` names the slow ones for a checkout that has no last run), and prints each binary's result when it ends (never interleaved). Every test's
time goes to `target/test-times.tsv`, each binary's counts to `target/test-counts.tsv`. `report`
prints the ten slowest tests, the ten binaries that cost the most CPU, each pass's wall and CPU time, and last one line `N passed, N failed` over
every pass. Exit status: 1 if any test failed or a binary could not run.
"""

import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARIES = os.path.join(ROOT, "target", "test-binaries.tsv")
TIMES = os.path.join(ROOT, "target", "test-times.tsv")
PASSES = os.path.join(ROOT, "target", "test-passes.tsv")
PREVIOUS = os.path.join(ROOT, "target", "test-times.previous.tsv")
COUNTS = os.path.join(ROOT, "target", "test-counts.tsv")
CPU = os.path.join(ROOT, "target", "test-cpu.tsv")


def binaries():
    with open(BINARIES) as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]


def previous_seconds():
    """Seconds each binary took in the last complete run, to start the longest first."""
    took = {}
    try:
        with open(PREVIOUS) as f:
            for line in f:
                _label, binary, _test, secs = line.rstrip("\n").split("\t")
                took[binary] = took.get(binary, 0.0) + float(secs)
    except FileNotFoundError:
        pass
    return took


def list_binaries():
    """Writes the test executables cargo reports building, as `run` reads them."""
    out = []
    for raw in sys.stdin:
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        package = os.path.basename(os.path.dirname(msg["manifest_path"]))
        name = target["name"] if "test" in target["kind"] else f"{package}:{target['name']}"
        out.append(f"{name}\t{msg['executable']}\t{os.path.dirname(msg['manifest_path'])}\n")
    with open(BINARIES, "w") as f:
        f.writelines(out)
    return 0


def run_one(label, name, path, cwd, args, env):
    """Runs one binary; returns (ok, text to print, [(test, seconds)], (passed, failed))."""
    cmd = [path, "-Z", "unstable-options", "--format", "json", "--report-time", *args]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines, times, failed, summary, stray = [], [], [], None, []
    for raw in proc.stdout:
        try:
            ev = json.loads(raw)
        except ValueError:
            stray.append(raw.rstrip("\n"))
            continue
        if ev.get("type") == "test" and ev.get("event") in ("ok", "failed"):
            times.append((ev["name"], float(ev.get("exec_time", 0.0))))
            if ev["event"] == "failed":
                failed.append(ev["name"])
                lines.append(f"---- {ev['name']} ----\n{ev.get('stdout', '')}")
            elif ev.get("stdout"):
                lines.append(f"---- {ev['name']} (output) ----\n{ev['stdout']}")
        elif ev.get("type") == "suite" and ev.get("event") in ("ok", "failed"):
            summary = ev
    # wait4: the binary's CPU with that of every process it waited for (the CLI runs it killed
    # or finished, the daemons, PostgreSQL): what a test costs the machine, whatever ran beside
    # it. Not its emulators: kept idle for its next test, they die with it, unwaited (process
    # accounting, `sa`, counts them: BENCHMARKS.md).
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    wall = time.monotonic() - started
    if code != 0 and stray:
        # What bypassed libtest's capture (a child process's stderr, a panic off the test thread).
        lines.append("---- other output (last 200 lines) ----\n" + "\n".join(stray[-200:]))
    if summary is None:
        head = f"{name}: exited {code} without a result"
    else:
        head = (f"{name}: {summary['passed']} passed, {summary['failed']} failed, "
                f"{summary['ignored']} ignored ({wall:.1f} s, {cpu:.0f} s CPU)")
    text = "\n".join([f"[{label}] {head}", *lines, *[f"    FAILED {t}" for t in failed]])
    # A binary that ended without a result counts as one failed test.
    counts = (summary["passed"], summary["failed"]) if summary else (0, max(1, len(failed)))
    return code == 0 and summary is not None, text, times, counts, cpu


def run(passes, jobs):
    """Runs every pass's binaries from one queue, `jobs` at a time: a pass's last binaries share
    the machine with the next pass's first, so no core waits for a pass's tail."""
    took = previous_seconds()
    todo = []
    for p in passes:
        env = dict(os.environ, RUSTC_BOOTSTRAP="1", **p["env"])
        mine = [b for b in binaries() if not p["only"] or b[0] in p["only"]]
        mine.sort(key=lambda b: (b[0] not in p["first"], -took.get(b[0], 0.0)))
        todo.extend((p["label"], env, p["args"], b) for b in mine)
    lock = threading.Lock()
    state = {"ok": {p["label"]: True for p in passes}, "next": 0,
             "span": {}, "left": {p["label"]: 0 for p in passes}}
    for label, _, _, _ in todo:
        state["left"][label] += 1

    def worker():
        while True:
            with lock:
                if state["next"] >= len(todo):
                    return
                label, env, args, (name, path, cwd) = todo[state["next"]]
                state["next"] += 1
                state["span"].setdefault(label, [time.monotonic(), None])
            ok, text, times, (passed, failed), cpu = run_one(label, name, path, cwd, args, env)
            with lock:
                print(text, flush=True)
                state["ok"][label] &= ok
                with open(COUNTS, "a") as f:
                    f.write(f"{label}\t{name}\t{passed}\t{failed}\n")
                with open(CPU, "a") as f:
                    f.write(f"{label}\t{name}\t{cpu:.1f}\n")
                with open(TIMES, "a") as f:
                    for test, secs in times:
                        f.write(f"{label}\t{name}\t{test}\t{secs:.3f}\n")
                state["left"][label] -= 1
                if state["left"][label] == 0:
                    # A pass's wall: from its first binary's start to its last one's end.
                    start = state["span"][label][0]
                    wall = time.monotonic() - start
                    with open(PASSES, "a") as f:
                        f.write(f"{label}\t{wall:.1f}\n")
                    count = sum(1 for t in todo if t[0] == label)
                    verdict = "ok" if state["ok"][label] else "FAILED"
                    print(f"[{label}] {count} binaries in {wall:.0f} s: {verdict}", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0 if all(state["ok"].values()) else 1


def report():
    rows = []
    with open(TIMES) as f:
        for line in f:
            label, binary, test, secs = line.rstrip("\n").split("\t")
            rows.append((float(secs), label, binary, test))
    rows.sort(reverse=True)
    print("the ten slowest tests:")
    for secs, label, binary, test in rows[:10]:
        print(f"  {secs:7.1f} s  [{label}] {binary} {test}")
    cpu = {}
    try:
        with open(CPU) as f:
            for line in f:
                label, binary, secs = line.rstrip("\n").split("\t")
                cpu.setdefault(label, []).append((float(secs), binary))
    except FileNotFoundError:
        pass
    costly = sorted(((secs, label, binary) for label, rows in cpu.items() for secs, binary in rows), reverse=True)
    print("the ten binaries that cost the most CPU (with their CLI runs; without their emulators):")
    for secs, label, binary in costly[:10]:
        print(f"  {secs:7.0f} s  [{label}] {binary}")
    with open(PASSES) as f:
        for line in f:
            label, wall = line.rstrip("\n").split("\t")
            used = sum(secs for secs, _ in cpu.get(label, []))
            print(f"pass {label}: {float(wall):.0f} s wall, {used:.0f} s CPU")
    # A complete run orders the next one; a filtered run's times would mislead it.
    if any(r[1] == "plain" for r in rows):
        os.replace(TIMES, PREVIOUS)
    else:
        os.remove(TIMES)
    passed = failed = 0
    try:
        with open(COUNTS) as f:
            for line in f:
                _label, _binary, p, n = line.rstrip("\n").split("\t")
                passed, failed = passed + int(p), failed + int(n)
    except FileNotFoundError:
        pass
    # The last line, over every pass: what CI reads.
    print(f"{passed} passed, {failed} failed")
    return 0


def main(argv):
    if argv[:1] == ["report"]:
        return report()
    if argv[:1] == ["list"]:
        return list_binaries()
    if argv[:1] != ["run"] or "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    # Passes are separated by `--then`; each is `OPTIONS -- LIBTEST_ARGS`. `--jobs` is the
    # queue's, whichever pass names it.
    groups, current = [], []
    for a in argv[1:]:
        if a == "--then":
            groups.append(current)
            current = []
        else:
            current.append(a)
    groups.append(current)
    passes, jobs = [], 1
    for g in groups:
        if "--" not in g:
            print(__doc__, file=sys.stderr)
            return 2
        opts, args = g[:g.index("--")], g[g.index("--") + 1:]
        p = {"label": "tests", "only": set(), "first": [], "env": {}, "args": args}
        it = iter(opts)
        for o in it:
            if o == "--label":
                p["label"] = next(it)
            elif o == "--jobs":
                jobs = int(next(it))
            elif o == "--only":
                p["only"] = set(next(it).split(","))
            elif o == "--first":
                p["first"] = next(it).split(",")
            elif o == "--env":
                k, v = next(it).split("=", 1)
                p["env"][k] = v
            else:
                print(f"run-tests.py: unknown option {o}", file=sys.stderr)
                return 2
        passes.append(p)
    return run(passes, jobs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
