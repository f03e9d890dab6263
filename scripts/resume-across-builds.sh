#!/usr/bin/env bash
# Proves a refactor changed no journal contract: journals written by one build (OLD), killed -9
# mid-way, are resumed by another (NEW) — create-cluster at three moments, then a teardown, on
# moto and a fresh SQLite journal. Usage: scripts/resume-across-builds.sh OLD_BINARY NEW_BINARY
# (build OLD from the commit before the change — for issue 58's move, 2419595: `git worktree add
# /tmp/old 2419595 && cargo build --manifest-path /tmp/old/Cargo.toml --bin infraflow`). Exits
# non-zero on the first failure, and when no kill landed mid-run (nothing would be proven).
set -euo pipefail
old=$1 new=$2
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
read -r moto_pid port < <(scripts/moto.sh start)
trap 'kill "$moto_pid" 2>/dev/null || true' EXIT
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_EC2_METADATA_DISABLED=true
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
work=$(mktemp -d)
export INFRAFLOW_DB="$work/journal.sqlite3"
py="$root/.venv/bin/python"
"$py" -c "
import boto3
boto3.client('route53', endpoint_url='$AWS_ENDPOINT_URL', region_name='us-east-1', aws_access_key_id='demo',
             aws_secret_access_key='demo').create_hosted_zone(Name='example.com', CallerReference='across')"
left() {
  "$py" -c "
import boto3
ec2 = boto3.client('ec2', endpoint_url='$AWS_ENDPOINT_URL', region_name='us-east-1', aws_access_key_id='demo',
                   aws_secret_access_key='demo')
vpcs = [v for v in ec2.describe_vpcs()['Vpcs'] if not v.get('IsDefault')]
up = ec2.describe_instances(Filters=[{'Name': 'instance-state-name', 'Values': ['running', 'pending']}])
print(len(vpcs) + sum(len(r['Instances']) for r in up['Reservations']))"
}
# Killed by the old build after `delay` seconds, then resumed by the new one to its end.
across() {
  local delay=$1 id=$2; shift 2
  "$old" run "$@" --id "$id" >/dev/null 2>&1 &
  local pid=$!
  sleep "$delay"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  local done_before
  done_before=$("$new" history "$id" 2>/dev/null | grep -c completed || true)
  "$new" run "$@" --id "$id" >/dev/null 2>"$work/$id.err" || { cat "$work/$id.err"; echo "FAILED: $id"; exit 1; }
  echo "$id: killed with $done_before steps done by the old build, completed by the new one"
  [ "$done_before" -gt 0 ] && midway=$((midway + 1))
  return 0
}
midway=0
for delay in 0.5 1 1.5; do
  across "$delay" "create-$delay" create-cluster --input scripts/demo/cluster.json
  across 0.7 "teardown-$delay" teardown --input scripts/demo/teardown.json
  n=$(left)
  [ "$n" = 0 ] || { echo "FAILED: $n VPCs or instances left after the teardown"; exit 1; }
done
[ "$midway" -gt 0 ] || { echo "FAILED: no kill landed after a step was journaled; nothing was proven"; exit 1; }
echo "every journal of the old build resumed by the new one ($midway killed mid-run); nothing left"
