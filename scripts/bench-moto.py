#!/usr/bin/env python3
"""The emulator's CPU per request: moto_server as pip installs it against scripts/moto-server (the
same moto less its per-request logging, directory listing and reflection), alternated on one
machine, N small EC2 reads each after a warm-up. Prints each round's CPU seconds (the server
process's, from /proc) and the median ratio. Run: .venv/bin/python scripts/bench-moto.py [N]"""

import os
import re
import statistics
import subprocess
import sys

import boto3

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVERS = {
    "moto_server": [os.path.join(ROOT, ".venv", "bin", "moto_server")],
    "scripts/moto-server": [os.path.join(ROOT, "scripts", "moto-server")],
}


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_of(command, n):
    env = dict(os.environ, MOTO_AMIS_PATH=os.path.join(ROOT, "tests", "fixtures", "moto-amis.json"))
    p = subprocess.Popen(command + ["-H", "127.0.0.1", "-p", "0"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in p.stderr:
            m = re.search(r"127\.0\.0\.1:(\d+)", line)
            if m:
                port = m.group(1)
                break
        ec2 = boto3.client("ec2", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                           aws_access_key_id="bench", aws_secret_access_key="bench")
        ec2.create_vpc(CidrBlock="10.0.0.0/16")
        for _ in range(20):
            ec2.describe_vpcs()
        before = cpu(p.pid)
        for _ in range(n):
            ec2.describe_vpcs()
            ec2.describe_subnets()
        return cpu(p.pid) - before
    finally:
        p.kill()
        p.wait()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    took = {name: [] for name in SERVERS}
    for r in range(3):
        for name, command in SERVERS.items():
            took[name].append(round_of(command, n))
            print(f"round {r + 1} {name}: {took[name][-1]:.2f} s CPU for {2 * n} requests")
    base, quick = (statistics.median(took[k]) for k in SERVERS)
    print(f"median CPU per request: moto_server {1000 * base / (2 * n):.2f} ms, "
          f"scripts/moto-server {1000 * quick / (2 * n):.2f} ms, ratio {quick / base:.2f}")


if __name__ == "__main__":
    main()
