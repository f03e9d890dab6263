//! What IAM holds for a cluster, read with the SDK straight from moto (never through infraflow):
//! its OIDC providers, roles with their trust and inline policies, and instance profiles — every
//! one named `<infraID>-…` or tagged as the cluster's, so a leak or a duplicate shows.
#![allow(dead_code)]

use std::collections::BTreeMap;

use serde_json::Value;

use super::moto::Clients;

#[derive(Debug, Default)]
pub struct IamState {
    /// ARN → tags.
    pub providers: BTreeMap<String, BTreeMap<String, String>>,
    /// Role name → (tags, trust policy, inline policies by name).
    pub roles: BTreeMap<String, Role>,
    /// Profile name → (tags, role names).
    pub profiles: BTreeMap<String, (BTreeMap<String, String>, Vec<String>)>,
}

#[derive(Debug, Default)]
pub struct Role {
    pub arn: String,
    pub tags: BTreeMap<String, String>,
    pub trust: Value,
    pub policies: BTreeMap<String, Value>,
}

/// Which of the repository's policy files a role's policy should be.
#[derive(Clone, Copy, Debug)]
pub enum Grants {
    /// `workflows/policies/seed-002/` where it has the role, else `workflows/policies/`.
    Seed002,
    Current,
}

/// A role's policy as the repository's copy has it (`file` names it), scoped as create-iam scopes
/// it for `ZPUBLIC1`/`ZPRIVATE1`/`ZLOCAL1`: the record-writing statement of the ingress role to
/// the public and private zones, of the control-plane operator to the local zone.
pub fn expected_policy(file: &str, grants: Grants) -> Value {
    let dir = format!("{}/../workflows/policies", env!("CARGO_MANIFEST_DIR"));
    let seed = format!("{dir}/seed-002/{file}.json");
    let path = match grants {
        Grants::Seed002 if std::path::Path::new(&seed).exists() => seed,
        _ => format!("{dir}/{file}.json"),
    };
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let zones = match file {
        "ingress" => {
            Some(serde_json::json!(["arn:aws:route53:::hostedzone/ZPUBLIC1", "arn:aws:route53:::hostedzone/ZPRIVATE1"]))
        }
        "control-plane-operator" => Some(serde_json::json!("arn:aws:route53:::hostedzone/ZLOCAL1")),
        _ => None,
    };
    if let Some(zones) = zones {
        for st in doc["Statement"].as_array_mut().unwrap() {
            if st["Action"].as_array().unwrap().iter().any(|a| a == "route53:ChangeResourceRecordSets") {
                st["Resource"] = zones.clone();
            }
        }
    }
    doc
}

/// The operator roles: HyperShift's output field, the role's suffix, its policy file.
pub const ROLES: [(&str, &str, &str); 7] = [
    ("ingressARN", "openshift-ingress", "ingress"),
    ("imageRegistryARN", "openshift-image-registry", "image-registry"),
    ("storageARN", "aws-ebs-csi-driver-controller", "storage"),
    ("kubeCloudControllerARN", "cloud-controller", "kube-cloud-controller"),
    ("nodePoolManagementARN", "node-pool", "node-pool-management"),
    ("controlPlaneOperatorARN", "control-plane-operator", "control-plane-operator"),
    ("networkARN", "cloud-network-config-controller", "network"),
];

/// IAM returns policy documents URL-encoded; moto sometimes does not.
pub fn policy_json(doc: &str) -> Value {
    serde_json::from_str(doc)
        .unwrap_or_else(|_| serde_json::from_str(&super::strict::decode(doc)).expect("a JSON policy"))
}

fn tags(t: &[aws_sdk_iam::types::Tag]) -> BTreeMap<String, String> {
    t.iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()
}

impl IamState {
    /// Everything of cluster `infra`: named `<infra>-…`, or carrying its ownership tag.
    pub fn read(c: &Clients, infra: &str) -> IamState {
        let iam = &c.iam;
        let owner = format!("kubernetes.io/cluster/{infra}");
        let prefix = format!("{infra}-");
        let mut s = IamState::default();
        let providers = c.block_on(iam.list_open_id_connect_providers().send()).unwrap();
        for p in providers.open_id_connect_provider_list() {
            let arn = p.arn().unwrap().to_string();
            let got = c.block_on(iam.get_open_id_connect_provider().open_id_connect_provider_arn(&arn).send()).unwrap();
            let t = tags(got.tags());
            if t.contains_key(&owner) || arn.ends_with(&format!("/{infra}")) {
                s.providers.insert(arn, t);
            }
        }
        let roles = c.block_on(iam.list_roles().max_items(1000).send()).unwrap();
        for r in roles.roles().iter().filter(|r| r.role_name().starts_with(&prefix)) {
            let name = r.role_name().to_string();
            let got = c.block_on(iam.get_role().role_name(&name).send()).unwrap();
            let role = got.role().unwrap();
            let mut policies = BTreeMap::new();
            let names = c.block_on(iam.list_role_policies().role_name(&name).send()).unwrap();
            for p in names.policy_names() {
                let doc = c.block_on(iam.get_role_policy().role_name(&name).policy_name(p).send()).unwrap();
                policies.insert(p.clone(), policy_json(doc.policy_document()));
            }
            let trust = role.assume_role_policy_document().map(policy_json).unwrap_or(Value::Null);
            s.roles.insert(name, Role { arn: role.arn().to_string(), tags: tags(role.tags()), trust, policies });
        }
        let profiles = c.block_on(iam.list_instance_profiles().max_items(1000).send()).unwrap();
        for p in profiles.instance_profiles().iter().filter(|p| p.instance_profile_name().starts_with(&prefix)) {
            let name = p.instance_profile_name().to_string();
            let got = c.block_on(iam.get_instance_profile().instance_profile_name(&name).send()).unwrap();
            let ip = got.instance_profile().unwrap();
            let roles = ip.roles().iter().map(|r| r.role_name().to_string()).collect();
            s.profiles.insert(name, (tags(ip.tags()), roles));
        }
        s
    }

    pub fn total(&self) -> usize {
        self.providers.len() + self.roles.len() + self.profiles.len()
    }

    /// "3 providers, 8 roles, 1 profiles": for messages.
    pub fn summary(&self) -> String {
        format!(
            "{} providers {:?}, {} roles {:?}, {} profiles {:?}",
            self.providers.len(),
            self.providers.keys().collect::<Vec<_>>(),
            self.roles.len(),
            self.roles.keys().collect::<Vec<_>>(),
            self.profiles.len(),
            self.profiles.keys().collect::<Vec<_>>()
        )
    }
}
