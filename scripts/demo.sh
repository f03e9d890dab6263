#!/usr/bin/env bash
# The main job on the embedded default, no AWS account needed: starts moto (the AWS emulator)
# on a free loopback port, creates the demo's public zone, creates a 3-zone cluster with a
# fresh SQLite journal (VPC, subnets, NAT gateways, DNS zones, PrivateLink, a node pool per
# zone), shows its status, checks it for drift, and tears it all down again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

cargo build --quiet --bin infraflow
infraflow="$root/target/debug/infraflow"

read -r moto_pid port < <(scripts/moto.sh start)
trap 'kill "$moto_pid" 2>/dev/null || true' EXIT
echo "moto (AWS emulator) on 127.0.0.1:$port"

# Point the standard AWS configuration at the emulator, and away from any real account.
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_EC2_METADATA_DISABLED=true
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export INFRAFLOW_DB="$root/.demo/journal.sqlite3"
rm -rf "$root/.demo" && mkdir -p "$root/.demo"

# infraflow looks the public zone up but never creates it: the demo plays the account owner.
"$root/.venv/bin/python" - <<PY
import boto3
r53 = boto3.client("route53", endpoint_url="$AWS_ENDPOINT_URL", region_name="us-east-1",
                   aws_access_key_id="demo", aws_secret_access_key="demo")
r53.create_hosted_zone(Name="example.com", CallerReference="infraflow-demo")
print("public zone example.com created (the account owner's job)")
PY

echo; echo "== infraflow run create-cluster --input scripts/demo/cluster.json"
"$infraflow" run create-cluster --input scripts/demo/cluster.json --id demo-cluster | tee "$root/.demo/cluster.json"
echo; echo "== infraflow status"
"$infraflow" status
echo; echo "== infraflow check --infra-id demo-infra --region us-east-1   (drift: reads only)"
"$infraflow" check --infra-id demo-infra --region us-east-1
echo; echo "== infraflow run teardown --input scripts/demo/teardown.json"
"$infraflow" run teardown --input scripts/demo/teardown.json --id demo-teardown
echo; echo "== infraflow status"
"$infraflow" status
echo; echo "journal kept at $INFRAFLOW_DB (try: INFRAFLOW_DB=$INFRAFLOW_DB $infraflow history demo-cluster)"
