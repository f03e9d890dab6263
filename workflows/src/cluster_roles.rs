//! The IAM roles a hosted cluster's operators assume and the worker's role (HyperShift's
//! `create iam aws`): each role's name, the service accounts its trust policy admits, and its
//! inline policy — `workflows/policies/`, HyperShift's grants as `hypershift-actions.tsv` lists
//! them with their sources (the seed's, dated, in `policies/seed-002/` for runs of create-iam
//! version 1; version 2's where HyperShift grants more since in `policies/hypershift-2025/`),
//! scoped to the cluster's hosted zones where they write records; Karpenter's for AutoNode.

use serde_json::{Value, json};

/// One operator role: `<infraID>-<suffix>`, assumed by `service_accounts` through the cluster's
/// OIDC provider, and the field of HyperShift's `--iam-json` that carries its ARN.
pub struct OperatorRole {
    pub field: &'static str,
    pub suffix: &'static str,
    pub service_accounts: &'static [&'static str],
    policy: &'static str,
    /// Seed 002's policy, where HyperShift grants more today.
    seed_policy: Option<&'static str>,
    /// What create-iam version 2 granted (HyperShift's at 1a96a12), where HyperShift grants more
    /// since.
    policy_2025: Option<&'static str>,
}

/// Which grants the operators' inline policies carry: seed 002's (runs submitted before
/// HyperShift's grants were carried over, replayed as they began), HyperShift's at 1a96a12
/// (create-iam version 2), or HyperShift's at the snapshot the suite pins (3ee9615: the
/// node-pool role reads Karpenter's interruption queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grants {
    Seed002,
    Hypershift2025,
    Current,
}

impl Grants {
    /// Every generation, oldest first.
    pub const ALL: [Grants; 3] = [Grants::Seed002, Grants::Hypershift2025, Grants::Current];
}

/// In HyperShift's order of creation (its log in seed 002).
pub const OPERATOR_ROLES: [OperatorRole; 7] = [
    OperatorRole {
        field: "ingressARN",
        suffix: "openshift-ingress",
        service_accounts: &["system:serviceaccount:openshift-ingress-operator:ingress-operator"],
        policy: include_str!("../policies/ingress.json"),
        seed_policy: None,
        policy_2025: None,
    },
    OperatorRole {
        field: "imageRegistryARN",
        suffix: "openshift-image-registry",
        service_accounts: &[
            "system:serviceaccount:openshift-image-registry:cluster-image-registry-operator",
            "system:serviceaccount:openshift-image-registry:registry",
        ],
        policy: include_str!("../policies/image-registry.json"),
        seed_policy: None,
        policy_2025: None,
    },
    OperatorRole {
        field: "storageARN",
        suffix: "aws-ebs-csi-driver-controller",
        service_accounts: &["system:serviceaccount:openshift-cluster-csi-drivers:aws-ebs-csi-driver-controller-sa"],
        policy: include_str!("../policies/storage.json"),
        seed_policy: Some(include_str!("../policies/seed-002/storage.json")),
        policy_2025: None,
    },
    OperatorRole {
        field: "kubeCloudControllerARN",
        suffix: "cloud-controller",
        service_accounts: &["system:serviceaccount:kube-system:kube-controller-manager"],
        policy: include_str!("../policies/kube-cloud-controller.json"),
        seed_policy: Some(include_str!("../policies/seed-002/kube-cloud-controller.json")),
        policy_2025: None,
    },
    OperatorRole {
        field: "nodePoolManagementARN",
        suffix: "node-pool",
        service_accounts: &["system:serviceaccount:kube-system:capa-controller-manager"],
        policy: include_str!("../policies/node-pool-management.json"),
        seed_policy: Some(include_str!("../policies/seed-002/node-pool-management.json")),
        policy_2025: Some(include_str!("../policies/hypershift-2025/node-pool-management.json")),
    },
    OperatorRole {
        field: "controlPlaneOperatorARN",
        suffix: "control-plane-operator",
        service_accounts: &["system:serviceaccount:kube-system:control-plane-operator"],
        policy: include_str!("../policies/control-plane-operator.json"),
        seed_policy: Some(include_str!("../policies/seed-002/control-plane-operator.json")),
        policy_2025: None,
    },
    OperatorRole {
        field: "networkARN",
        suffix: "cloud-network-config-controller",
        service_accounts: &[
            "system:serviceaccount:openshift-cloud-network-config-controller:cloud-network-config-controller",
        ],
        policy: include_str!("../policies/network.json"),
        seed_policy: None,
        policy_2025: None,
    },
];

/// HyperShift's Karpenter role (`karpenterPolicy`), made for an AutoNode cluster: Karpenter's
/// service account launches and deletes the nodes, their launch templates and instance profiles.
pub const KARPENTER_ROLE: OperatorRole = OperatorRole {
    field: "karpenterARN",
    suffix: "karpenter",
    service_accounts: &["system:serviceaccount:kube-system:karpenter"],
    policy: include_str!("../policies/karpenter.json"),
    seed_policy: None,
    policy_2025: None,
};

/// The longest suffix: with it, a role name must fit IAM's 64 characters.
pub const LONGEST_SUFFIX: usize = "cloud-network-config-controller".len();

/// The hosted zones whose records the ingress operator and the control-plane operator write.
/// A zone not given widens its statement to every zone of the account.
#[derive(Clone, Debug, Default)]
pub struct Zones {
    pub public: Option<String>,
    pub private: Option<String>,
    pub local: Option<String>,
}

fn zone_arn(id: &str) -> String {
    format!("arn:aws:route53:::hostedzone/{}", id.trim_start_matches("/hostedzone/"))
}

const ANY_ZONE: &str = "arn:aws:route53:::hostedzone/*";

impl OperatorRole {
    pub fn name(&self, infra_id: &str) -> String {
        format!("{infra_id}-{}", self.suffix)
    }

    /// The inline policy of `grants`, with its record-writing statement scoped to this cluster's
    /// zones (ingress: public and private; control-plane operator: the local zone).
    pub fn policy(&self, zones: &Zones, grants: Grants) -> Value {
        let text = match grants {
            Grants::Seed002 => self.seed_policy.or(self.policy_2025).unwrap_or(self.policy),
            Grants::Hypershift2025 => self.policy_2025.unwrap_or(self.policy),
            Grants::Current => self.policy,
        };
        let mut doc: Value = serde_json::from_str(text).expect("the policies in workflows/policies/ are JSON");
        let resource = match self.suffix {
            "openshift-ingress" => match (&zones.public, &zones.private) {
                (Some(public), Some(private)) => json!([zone_arn(public), zone_arn(private)]),
                _ => json!([ANY_ZONE]),
            },
            "control-plane-operator" => json!(zones.local.as_deref().map(zone_arn).unwrap_or_else(|| ANY_ZONE.into())),
            _ => return doc,
        };
        for statement in doc["Statement"].as_array_mut().into_iter().flatten() {
            let writes_records = statement["Action"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "route53:ChangeResourceRecordSets"));
            if writes_records {
                statement["Resource"] = resource.clone();
            }
        }
        doc
    }
}

/// HyperShift's KMS provider role (`kmsProviderPolicy`), made when a KMS key encrypts etcd: the
/// kms-provider service account may use that one key.
pub const KMS_PROVIDER_SUFFIX: &str = "kms-provider";
pub const KMS_PROVIDER_ACCOUNTS: &[&str] = &["system:serviceaccount:kube-system:kms-provider"];

pub fn kms_provider_policy(key_arn: &str) -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
            "Resource": key_arn
        }]
    })
}

/// Who may assume an operator role: the service accounts, by web identity through the
/// cluster's OIDC provider (HyperShift's `oidcTrustPolicy`).
pub fn trust_policy(provider_arn: &str, issuer_host_path: &str, service_accounts: &[&str]) -> Value {
    let subjects = match service_accounts {
        [one] => json!(one),
        many => json!(many),
    };
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {format!("{issuer_host_path}:sub"): subjects}}
        }]
    })
}

/// The worker role: assumed by EC2 for the nodes' instance profile.
pub fn worker_trust_policy() -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{"Action": "sts:AssumeRole", "Principal": {"Service": "ec2.amazonaws.com"}, "Effect": "Allow", "Sid": ""}]
    })
}

pub fn worker_policy() -> Value {
    serde_json::from_str(include_str!("../policies/worker.json")).expect("workflows/policies/worker.json is JSON")
}

/// HyperShift's names for the worker: profile `<infraID>-worker`, role `<profile>-role`, its
/// inline policy `<profile>-policy`.
pub fn worker_names(infra_id: &str) -> (String, String, String) {
    let profile = format!("{infra_id}-worker");
    (format!("{profile}-role"), format!("{profile}-policy"), profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_file_parses_and_only_two_roles_are_scoped_to_zones() {
        let zones = Zones { public: Some("ZPUB".into()), private: Some("ZPRIV".into()), local: Some("ZLOC".into()) };
        for grants in Grants::ALL {
            for role in &OPERATOR_ROLES {
                let scoped = role.policy(&zones, grants).to_string();
                let open = role.policy(&Zones::default(), grants).to_string();
                assert_eq!(scoped != open, ["openshift-ingress", "control-plane-operator"].contains(&role.suffix));
            }
            let ingress = OPERATOR_ROLES[0].policy(&zones, grants).to_string();
            assert!(ingress.contains("hostedzone/ZPUB") && ingress.contains("hostedzone/ZPRIV"), "{ingress}");
            assert!(OPERATOR_ROLES[5].policy(&zones, grants).to_string().contains("hostedzone/ZLOC"));
            assert!(OPERATOR_ROLES[5].policy(&Zones::default(), grants).to_string().contains("hostedzone/*"));
        }
    }

    fn actions(doc: &Value) -> std::collections::BTreeSet<String> {
        let mut all = std::collections::BTreeSet::new();
        for st in doc["Statement"].as_array().unwrap() {
            match &st["Action"] {
                Value::String(a) => drop(all.insert(a.clone())),
                Value::Array(a) => all.extend(a.iter().map(|x| x.as_str().unwrap().to_string())),
                other => panic!("an Action that is neither a string nor a list: {other}"),
            }
        }
        all
    }

    /// `policies/hypershift-actions.tsv` is the record of what HyperShift grants each role and
    /// where it says so; every role's current policy grants exactly its rows.
    #[test]
    fn every_role_grants_exactly_the_actions_the_hypershift_table_lists() {
        let table = include_str!("../policies/hypershift-actions.tsv");
        let mut listed: std::collections::BTreeMap<&str, std::collections::BTreeSet<String>> = Default::default();
        for line in table.lines().filter(|l| !l.starts_with('#')) {
            let cols: Vec<&str> = line.split('\t').collect();
            assert!(cols.len() == 3 && cols[2].contains("hypershift"), "a row without its HyperShift source: {line:?}");
            listed.entry(cols[0]).or_default().insert(cols[1].to_string());
        }
        let mut held = std::collections::BTreeMap::new();
        for role in &OPERATOR_ROLES {
            held.insert(role.suffix, actions(&role.policy(&Zones::default(), Grants::Current)));
        }
        held.insert(KARPENTER_ROLE.suffix, actions(&KARPENTER_ROLE.policy(&Zones::default(), Grants::Current)));
        held.insert("worker-role", actions(&worker_policy()));
        held.insert(KMS_PROVIDER_SUFFIX, actions(&kms_provider_policy("arn:aws:kms:us-east-1:1:key/k")));
        for (role, granted) in &held {
            let rows = listed.remove(role).unwrap_or_else(|| panic!("no rows for role {role} in the table"));
            assert_eq!(&rows, granted, "role {role}: the table's rows (left) and the policy (right) differ");
        }
        assert!(listed.is_empty(), "rows for roles create-iam does not make: {:?}", listed.keys());
    }

    /// The operators' grants as HyperShift's current CLI has them that the seed lacked: the
    /// control-plane operator makes the workers' default security group with its role.
    #[test]
    fn the_current_grants_carry_what_hypershift_added_since_the_seed() {
        let cpo = actions(&OPERATOR_ROLES[5].policy(&Zones::default(), Grants::Current));
        let seed = actions(&OPERATOR_ROLES[5].policy(&Zones::default(), Grants::Seed002));
        for a in ["ec2:CreateSecurityGroup", "ec2:AuthorizeSecurityGroupEgress", "ec2:DescribeSubnets"] {
            assert!(cpo.contains(a) && !seed.contains(a), "{a}");
        }
        let pool = actions(&OPERATOR_ROLES[4].policy(&Zones::default(), Grants::Current));
        assert!(pool.contains("ec2:DescribeInstanceTypes") && !pool.contains("ec2:AllocateAddress"));
        // Karpenter's interruption queue (HyperShift 3ee9615), which version 2 did not grant.
        let before = actions(&OPERATOR_ROLES[4].policy(&Zones::default(), Grants::Hypershift2025));
        for a in ["sqs:DeleteMessage", "sqs:ReceiveMessage"] {
            assert!(pool.contains(a) && !before.contains(a), "{a}");
        }
        assert_eq!(pool.len(), before.len() + 2, "only the queue's actions came since");
        let csi = OPERATOR_ROLES[2].policy(&Zones::default(), Grants::Current);
        assert_eq!(csi["Statement"][2]["Condition"]["Bool"]["kms:GrantIsForAWSResource"], true);
    }

    #[test]
    fn a_trust_policy_binds_the_issuers_subject_to_the_service_accounts() {
        let t = trust_policy("arn:aws:iam::1:oidc-provider/b.s3.amazonaws.com/c", "b.s3.amazonaws.com/c", &["sa:one"]);
        assert_eq!(t["Statement"][0]["Condition"]["StringEquals"]["b.s3.amazonaws.com/c:sub"], "sa:one");
        let two = trust_policy("arn", "h/p", &["a", "b"]);
        assert_eq!(two["Statement"][0]["Condition"]["StringEquals"]["h/p:sub"], json!(["a", "b"]));
    }

    #[test]
    fn the_longest_role_name_of_a_32_character_infra_id_fits_iam() {
        let infra = "a".repeat(32);
        assert!(OPERATOR_ROLES.iter().all(|r| r.name(&infra).len() <= 64));
        assert_eq!(OPERATOR_ROLES.iter().map(|r| r.suffix.len()).max(), Some(LONGEST_SUFFIX));
    }
}
