//! Who made a resource a cluster's controllers leave behind (volumes, snapshots, network
//! interfaces), judged from the marks its maker writes and nobody else has reason to: a teardown
//! deletes one only on its maker's proof, never because it carries the cluster's ownership tag
//! (anyone can write that, and backup tools copy it onto what they make). ARCHITECTURE.md's
//! table of what is deleted on which proof is this file's, row by row.

use crate::error::AwsError;
use crate::tags::ownership_pairs;

/// The EBS CSI driver's marks on a volume it made (`CSIVolumeName`, its cluster tag) and the
/// in-tree provisioner's (`kubernetes.io/created-for/pv/name`).
pub const VOLUME_MAKER_KEYS: &[&str] =
    &["CSIVolumeName", "ebs.csi.aws.com/cluster", "kubernetes.io/created-for/pv/name"];
/// The EBS CSI driver's marks on a snapshot it made for a `VolumeSnapshot`.
pub const SNAPSHOT_MAKER_KEYS: &[&str] = &["CSIVolumeSnapshotName", "ebs.csi.aws.com/cluster"];
/// Key prefixes of the backup and restore tools that copy a volume's tags (the ownership tag
/// with them) onto what they make: Velero (`velero.io/backup`, `velero.io/restore-name`), AWS
/// Backup (`aws:backup:source-resource`), Data Lifecycle Manager (`aws:dlm:lifecycle-policy-id`,
/// `dlm:managed`). What carries one is a backup or a restore: never the cluster's to delete.
pub const BACKUP_KEY_PREFIXES: &[&str] = &["velero.io/", "aws:backup:", "aws:dlm:", "dlm:"];
/// How the cluster's controllers describe the interfaces they create and may leave `available`:
/// the AWS VPC CNI (`aws-K8S-<instance>`), the cloud provider's load balancers (`ELB …`).
pub const INTERFACE_MAKER_DESCRIPTIONS: &[&str] = &["aws-K8S-", "ELB "];

/// What a teardown of the cluster whose tag found it does with one such resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its maker's proof is there, and it names only this cluster: deleted.
    Delete,
    /// Carries the cluster's name without its maker's proof: left, and named with this reason.
    Leave(String),
}

fn has_key(tags: &[(String, String)], keys: &[&str]) -> bool {
    tags.iter().any(|(k, _)| keys.contains(&k.as_str()))
}

fn backup_marker(tags: &[(String, String)]) -> Option<&str> {
    tags.iter().map(|(k, _)| k.as_str()).find(|k| BACKUP_KEY_PREFIXES.iter().any(|p| k.starts_with(p)))
}

/// What leaves any of these kinds whoever made it: a backup or restore tool's mark. (A second
/// cluster's ownership tag does not leave it here: its delete pauses naming both clusters,
/// `other_owners`, since the operator must decide whose it is.)
fn common(tags: &[(String, String)]) -> Option<String> {
    let k = backup_marker(tags)?;
    Some(format!("carries {k}: a backup or restore tool made it (tags copied), not the cluster's"))
}

/// A volume: the storage driver's mark, no backup's.
pub fn volume(tags: &[(String, String)]) -> Verdict {
    if let Some(why) = common(tags) {
        return Verdict::Leave(why);
    }
    if !has_key(tags, VOLUME_MAKER_KEYS) {
        return Verdict::Leave(format!(
            "carries the cluster's tag without a storage driver's mark ({}): not shown to be the cluster's",
            VOLUME_MAKER_KEYS.join(", ")
        ));
    }
    Verdict::Delete
}

/// A snapshot: the CSI driver's mark, no backup's.
pub fn snapshot(tags: &[(String, String)]) -> Verdict {
    if let Some(why) = common(tags) {
        return Verdict::Leave(why);
    }
    if !has_key(tags, SNAPSHOT_MAKER_KEYS) {
        return Verdict::Leave(format!(
            "carries the cluster's tag without the CSI driver's mark ({}): a backup or a person's, not shown to be the cluster's",
            SNAPSHOT_MAKER_KEYS.join(", ")
        ));
    }
    Verdict::Delete
}

/// A network interface (tagged as the cluster's, or untagged in its subnets): a controller's
/// description, and not managed by an AWS service (those go with their service's resource).
/// (One the cluster's own NAT gateway or endpoint names as its interface is the cluster's
/// without this: `interfaces::Found::named_by`.)
pub fn interface(tags: &[(String, String)], description: &str, requester_managed: bool) -> Verdict {
    if let Some(why) = common(tags) {
        return Verdict::Leave(why);
    }
    if requester_managed {
        return Verdict::Leave("managed by an AWS service: it goes with that service's resource".into());
    }
    // infraflow's own identity and creator (a node pool member's interface, tagged with it).
    if has_key(tags, &[crate::tags::IDENTITY_TAG]) && has_key(tags, &[crate::tags::CREATED_BY_TAG]) {
        return Verdict::Delete;
    }
    if !INTERFACE_MAKER_DESCRIPTIONS.iter().any(|p| description.starts_with(p)) {
        let said = if description.is_empty() { "no description".to_string() } else { format!("{description:?}") };
        return Verdict::Leave(format!(
            "{said}, not one of the cluster's controllers' ({}…): a person's or another tool's; it keeps its subnet",
            INTERFACE_MAKER_DESCRIPTIONS.join("…, ")
        ));
    }
    Verdict::Delete
}

/// The clusters a resource is tagged owned by, when more than one: one cluster's teardown never
/// deletes or detaches what another also claims (it pauses naming both).
pub fn other_owners(tags: &[(String, String)]) -> Option<Vec<String>> {
    let owners: Vec<String> = ownership_pairs(tags)
        .into_iter()
        .filter_map(|(k, _)| k.strip_prefix(crate::tags::OWNERSHIP_PREFIX).map(str::to_string))
        .collect();
    (owners.len() > 1).then_some(owners)
}

/// The pause of a delete of what two clusters are tagged as owning: neither's teardown decides.
pub fn two_owners(action: &'static str, what: &str, id: &str, owners: &[String]) -> AwsError {
    AwsError {
        operator: true,
        ..AwsError::terminal(
            action,
            format!(
                "{what} {id} is tagged as owned by clusters {}: one cluster's teardown never deletes or detaches it; remove the ownership tag of the cluster it is not (or delete it yourself), then `infraflow retry`",
                owners.join(" and ")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const OWN: (&str, &str) = ("kubernetes.io/cluster/c1", "owned");

    #[test]
    fn a_volume_goes_only_on_its_drivers_mark_and_never_as_a_backup() {
        assert_eq!(volume(&t(&[OWN, ("CSIVolumeName", "pvc-1")])), Verdict::Delete);
        assert_eq!(volume(&t(&[OWN, ("kubernetes.io/created-for/pv/name", "pv-1")])), Verdict::Delete);
        assert!(matches!(volume(&t(&[OWN])), Verdict::Leave(_)), "the tag alone proves nothing");
        let restored = t(&[OWN, ("CSIVolumeName", "pvc-1"), ("velero.io/restore-name", "into-b")]);
        assert!(matches!(volume(&restored), Verdict::Leave(why) if why.contains("velero.io/restore-name")));
    }

    #[test]
    fn a_snapshot_goes_only_on_the_csi_drivers_mark() {
        assert_eq!(snapshot(&t(&[OWN, ("CSIVolumeSnapshotName", "snap-1")])), Verdict::Delete);
        assert!(matches!(snapshot(&t(&[OWN, ("velero.io/backup", "nightly")])), Verdict::Leave(_)));
        assert!(matches!(
            snapshot(&t(&[OWN, ("CSIVolumeSnapshotName", "s"), ("aws:backup:source-resource", "x")])),
            Verdict::Leave(_)
        ));
        assert!(matches!(snapshot(&t(&[OWN])), Verdict::Leave(_)));
    }

    #[test]
    fn an_interface_goes_only_with_a_controllers_description() {
        assert_eq!(interface(&[], "aws-K8S-i-0123", false), Verdict::Delete, "untagged in the cluster's subnet");
        assert_eq!(interface(&t(&[OWN]), "ELB net/c1-ingress/abc", false), Verdict::Delete);
        assert!(matches!(interface(&[], "licence server standby: keep", false), Verdict::Leave(_)));
        assert!(matches!(interface(&t(&[OWN]), "", false), Verdict::Leave(_)));
        assert!(matches!(interface(&[], "aws-K8S-i-0123", true), Verdict::Leave(_)));
        let node = t(&[OWN, ("infraflow.io/identity", "c1/pool/w/0"), ("infraflow.io/created-by", "w@1")]);
        assert_eq!(interface(&node, "", false), Verdict::Delete, "a node of infraflow's");
    }

    #[test]
    fn two_owners_are_named() {
        assert_eq!(other_owners(&t(&[OWN])), None);
        let two = t(&[OWN, ("kubernetes.io/cluster/c2", "owned")]);
        assert_eq!(other_owners(&two), Some(vec!["c1".to_string(), "c2".to_string()]));
    }
}

/// A launch template of cluster `infra` (found by its ownership tag): Karpenter's when it carries
/// Karpenter's own marks — the name Karpenter gives (`karpenter.k8s.aws/…`), the EC2NodeClass it
/// was made for, and this cluster's name in Karpenter's cluster tag — and no backup's. (Where
/// it launches is judged beside this: `look_alikes::split_launch_templates`.)
pub fn karpenter_template(name: &str, tags: &[(String, String)], infra: &str) -> Verdict {
    use crate::compute::{CLUSTER_NAME_TAG, KARPENTER_NAME_PREFIX, NODE_CLASS_TAG};
    if let Some(why) = common(tags) {
        return Verdict::Leave(why);
    }
    let value = |key: &str| tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let missing: Vec<String> = [
        (!name.starts_with(KARPENTER_NAME_PREFIX)).then(|| format!("a name starting {KARPENTER_NAME_PREFIX}")),
        value(NODE_CLASS_TAG).is_none().then(|| NODE_CLASS_TAG.to_string()),
        (value(CLUSTER_NAME_TAG) != Some(infra)).then(|| format!("{CLUSTER_NAME_TAG}={infra}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() {
        Verdict::Delete
    } else {
        Verdict::Leave(format!(
            "carries the cluster's tag without Karpenter's marks (lacks {}): not shown to be the cluster's",
            missing.join(", ")
        ))
    }
}

#[cfg(test)]
mod karpenter_tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_template_is_karpenters_only_with_its_name_its_node_class_and_this_cluster() {
        let karpenter = tags(&[
            ("kubernetes.io/cluster/c1", "owned"),
            ("eks:eks-cluster-name", "c1"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("karpenter.sh/nodepool", "default"),
        ]);
        assert_eq!(karpenter_template("karpenter.k8s.aws/123", &karpenter, "c1"), Verdict::Delete);
        let Verdict::Leave(why) = karpenter_template("my-template", &karpenter, "c1") else { panic!() };
        assert!(why.contains("a name starting karpenter.k8s.aws/"), "{why}");
        let Verdict::Leave(why) = karpenter_template("karpenter.k8s.aws/123", &karpenter, "c2") else { panic!() };
        assert!(why.contains("eks:eks-cluster-name=c2"), "another cluster's Karpenter: {why}");
        let bare = tags(&[("kubernetes.io/cluster/c1", "owned")]);
        let Verdict::Leave(why) = karpenter_template("karpenter.k8s.aws/123", &bare, "c1") else { panic!() };
        assert!(why.contains("karpenter.k8s.aws/ec2nodeclass"), "{why}");
        let mut backup = karpenter.clone();
        backup.push(("aws:backup:source-resource".into(), "x".into()));
        assert!(matches!(karpenter_template("karpenter.k8s.aws/123", &backup, "c1"), Verdict::Leave(_)));
    }
}
