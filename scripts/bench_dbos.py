"""DBOS Transact on the same PostgreSQL server as `infraflow bench --db postgres://...`, in the
shape of DBOS's own benchmark and of infraflow's figures (a) and (b): sequential durable no-op steps
of one workflow, and 100 workflows of 20 steps started at once. Prints one JSON object.

usage: bench_dbos.py URL SEQUENTIAL_STEPS ROUNDS   (URL: postgresql://user:password@host:port/db)
"""
import json
import statistics
import sys
import time

from dbos import DBOS, DBOSConfig

url, steps, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
config: DBOSConfig = {"name": "infraflow-bench", "system_database_url": url, "log_level": "WARNING"}
DBOS(config=config)


@DBOS.step()
def noop(i: int) -> int:
    return i


@DBOS.workflow()
def canary(n: int) -> int:
    for i in range(n):
        noop(i)
    return n


def sequential() -> float:
    start = time.perf_counter()
    canary(steps)
    return steps / (time.perf_counter() - start)


def concurrent(workflows: int = 100, each: int = 20) -> float:
    start = time.perf_counter()
    handles = [DBOS.start_workflow(canary, each) for _ in range(workflows)]
    for h in handles:
        h.get_result()
    return workflows * each / (time.perf_counter() - start)


DBOS.launch()
seq = [sequential() for _ in range(rounds)]
par = [concurrent() for _ in range(rounds)]
DBOS.destroy()
print(json.dumps({
    "dbosVersion": __import__("importlib.metadata").metadata.version("dbos"),
    "sequentialStepsPerSec": statistics.median(seq),
    "concurrentStepsPerSec": statistics.median(par),
    "rounds": {"sequential": seq, "concurrent": par},
}))
