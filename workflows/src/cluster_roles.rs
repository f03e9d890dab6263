//! The IAM roles a hosted cluster's operators assume and the worker's role (seed 002; HyperShift's
//! `create iam aws`): each role's name, the service accounts its trust policy admits, and its
//! inline policy — `workflows/policies/`, verbatim from the seed but for the hosted zones the
//! record-writing statements are scoped to.

use serde_json::{Value, json};

/// One operator role: `<infraID>-<suffix>`, assumed by `service_accounts` through the cluster's
/// OIDC provider, and the field of HyperShift's `--iam-json` that carries its ARN.
pub struct OperatorRole {
    pub field: &'static str,
    pub suffix: &'static str,
    pub service_accounts: &'static [&'static str],
    policy: &'static str,
}

/// In HyperShift's order of creation (its log in seed 002).
pub const OPERATOR_ROLES: [OperatorRole; 7] = [
    OperatorRole {
        field: "ingressARN",
        suffix: "openshift-ingress",
        service_accounts: &["system:serviceaccount:openshift-ingress-operator:ingress-operator"],
        policy: include_str!("../policies/ingress.json"),
    },
    OperatorRole {
        field: "imageRegistryARN",
        suffix: "openshift-image-registry",
        service_accounts: &[
            "system:serviceaccount:openshift-image-registry:cluster-image-registry-operator",
            "system:serviceaccount:openshift-image-registry:registry",
        ],
        policy: include_str!("../policies/image-registry.json"),
    },
    OperatorRole {
        field: "storageARN",
        suffix: "aws-ebs-csi-driver-controller",
        service_accounts: &["system:serviceaccount:openshift-cluster-csi-drivers:aws-ebs-csi-driver-controller-sa"],
        policy: include_str!("../policies/storage.json"),
    },
    OperatorRole {
        field: "kubeCloudControllerARN",
        suffix: "cloud-controller",
        service_accounts: &["system:serviceaccount:kube-system:kube-controller-manager"],
        policy: include_str!("../policies/kube-cloud-controller.json"),
    },
    OperatorRole {
        field: "nodePoolManagementARN",
        suffix: "node-pool",
        service_accounts: &["system:serviceaccount:kube-system:capa-controller-manager"],
        policy: include_str!("../policies/node-pool-management.json"),
    },
    OperatorRole {
        field: "controlPlaneOperatorARN",
        suffix: "control-plane-operator",
        service_accounts: &["system:serviceaccount:kube-system:control-plane-operator"],
        policy: include_str!("../policies/control-plane-operator.json"),
    },
    OperatorRole {
        field: "networkARN",
        suffix: "cloud-network-config-controller",
        service_accounts: &[
            "system:serviceaccount:openshift-cloud-network-config-controller:cloud-network-config-controller",
        ],
        policy: include_str!("../policies/network.json"),
    },
];

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

    /// The inline policy: the seed's, with its record-writing statement scoped to this cluster's
    /// zones (ingress: public and private; control-plane operator: the local zone).
    pub fn policy(&self, zones: &Zones) -> Value {
        let mut doc: Value = serde_json::from_str(self.policy).expect("the policies in workflows/policies/ are JSON");
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
        for role in &OPERATOR_ROLES {
            let scoped = role.policy(&zones).to_string();
            let open = role.policy(&Zones::default()).to_string();
            assert_eq!(scoped != open, ["openshift-ingress", "control-plane-operator"].contains(&role.suffix));
        }
        let ingress = OPERATOR_ROLES[0].policy(&zones).to_string();
        assert!(ingress.contains("hostedzone/ZPUB") && ingress.contains("hostedzone/ZPRIV"), "{ingress}");
        assert!(OPERATOR_ROLES[5].policy(&zones).to_string().contains("hostedzone/ZLOC"));
        assert!(OPERATOR_ROLES[5].policy(&Zones::default()).to_string().contains("hostedzone/*"));
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
