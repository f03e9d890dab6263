//! Whether a provision (or create-cluster's infrastructure) fits Route53's hosted zone limit
//! before it is journaled: its two private zones (the cluster's and `<name>.hypershift.local`),
//! less those of their names that exist already, against the limit less the account's zones.
//! One `GetAccountLimit` (limit and count together) when it fits; a read of each name only when
//! that says it would not. Where the limit cannot be read, nothing is checked, and the note says
//! so.

use infraflow_activities::dns::{zone_room, zones_existing};
use infraflow_activities::{AwsError, AwsPool};
use serde_json::Value;

use crate::provision::input::ProvisionInput;

/// What hosted zones a provision of `input` makes would overrun, as a phrase (`needs 2 hosted
/// zones, 1 free (quota 500, 499 in use)`), and a note when the limit could not be read.
pub async fn shortfalls_before_submit(
    pool: &AwsPool,
    workflow: &str,
    input: &Value,
) -> Result<(Vec<String>, Option<String>), AwsError> {
    let infra = match workflow {
        "provision-infra" => input,
        "create-cluster" => &input["infra"],
        _ => return Ok((Vec::new(), None)),
    };
    let Ok(p) = serde_json::from_value::<ProvisionInput>(infra.clone()) else { return Ok((Vec::new(), None)) };
    let aws = pool.region(&p.region).await;
    let room = match zone_room(&aws).await {
        Ok(room) => room,
        Err(e) if !e.retryable => {
            let why = e.code.clone().unwrap_or(e.message);
            return Ok((
                Vec::new(),
                Some(format!(
                    "Route53's hosted zone limit could not be read ({why}): the private zones were not checked"
                )),
            ));
        }
        Err(e) => return Err(e),
    };
    let names = [p.private_zone_name(), format!("{}.hypershift.local", p.name)];
    let free = room.limit.saturating_sub(room.count);
    let mut new = names.len() as u32;
    if new > free {
        new -= zones_existing(&aws, &names).await?.min(new);
    }
    let short = (new > free).then(|| {
        format!(
            "needs {new} hosted zone{}, {free} free (quota {}, {} in use)",
            if new == 1 { "" } else { "s" },
            room.limit,
            room.count
        )
    });
    Ok((short.into_iter().collect(), None))
}
