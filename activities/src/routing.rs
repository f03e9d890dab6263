//! Route tables: creation, default routes (to a NAT or internet gateway), subnet associations,
//! the VPC's main table, and deletion that first undoes associations.

use aws_sdk_ec2::types::{ResourceType, RouteTable};

use crate::adopt::adopt_hypershift;
use crate::client::Aws;
use crate::consistency::once_consistent;
use crate::error::{AwsError, AwsResult, classify};
use crate::error::{gone_ok, missing};
use crate::inventory::Lookup;
use crate::tags::{IDENTITY_TAG, Identity, TagQuery, filter};

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &["ec2:DescribeRouteTables"];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &[
    "ec2:CreateRouteTable",
    "ec2:CreateRoute",
    "ec2:ReplaceRoute",
    "ec2:AssociateRouteTable",
    "ec2:ReplaceRouteTableAssociation",
    "ec2:CreateTags",
];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &[
    "ec2:DeleteRouteTable",
    "ec2:DisassociateRouteTable",
    // Deleting a table that became the VPC's main one hands that role to another table first.
    "ec2:ReplaceRouteTableAssociation",
];

/// Where a default route points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Nat(String),
    InternetGateway(String),
}

async fn describe(aws: &Aws, f: aws_sdk_ec2::types::Filter) -> AwsResult<Vec<RouteTable>> {
    let out =
        aws.ec2.describe_route_tables().filters(f).send().await.map_err(|e| classify("DescribeRouteTables", e))?;
    Ok(out.route_tables().to_vec())
}

pub async fn find_route_tables(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    Ok(describe(aws, q.filter())
        .await?
        .iter()
        .filter(|t| q.matches(t.tags()))
        .filter_map(|t| t.route_table_id().map(str::to_string))
        .collect())
}

/// A route table with a default route to `target`, associated with `subnets`, and optionally
/// made the VPC's main table.
pub async fn ensure_route_table(
    aws: &Aws,
    id: &Identity,
    vpc_id: &str,
    target: &Target,
    subnets: &[String],
    main: bool,
    lookup: Lookup,
) -> AwsResult<String> {
    let q = id.query();
    let found = match lookup {
        Lookup::First => match describe(aws, q.filter()).await?.into_iter().find(|t| q.matches(t.tags())) {
            Some(t) => {
                crate::adopt::mark_adopted_given(aws, table_id(&t), id, &crate::adopt::pairs(t.tags())).await?;
                Some(t)
            }
            None => {
                let find = |q: TagQuery| async move {
                    let all = describe(aws, q.filter()).await?;
                    Ok(all.into_iter().filter(|t| q.matches(t.tags()) && t.vpc_id() == Some(vpc_id)).collect())
                };
                adopt_hypershift(aws, id, "route table", find, table_id).await?
            }
        },
        Lookup::Skip => None,
    };
    let table = match found {
        Some(t) => t,
        None => {
            let out = once_consistent(|| async {
                aws.ec2
                    .create_route_table()
                    .vpc_id(vpc_id)
                    .client_token(id.token())
                    .tag_specifications(id.tag_spec(ResourceType::RouteTable))
                    .send()
                    .await
                    .map_err(|e| classify("CreateRouteTable", e))
            })
            .await?;
            out.route_table().cloned().ok_or_else(|| missing("CreateRouteTable", "route table"))?
        }
    };
    let rt = table.route_table_id().ok_or_else(|| missing("DescribeRouteTables", "route table id"))?.to_string();
    // The table, its target and the subnets may all be moments old: each call waits in place.
    // Route, associations and main-ness are independent: side by side.
    let route = once_consistent(|| ensure_default_route(aws, &table, &rt, target));
    let todo: Vec<&str> = subnets
        .iter()
        .map(String::as_str)
        .filter(|s| !table.associations().iter().any(|a| a.subnet_id() == Some(*s)))
        .collect();
    // Subnets made by this same execution, whose inventory found nothing of the cluster, have no
    // table of their own yet: associated straight away, with no read of where they are.
    let fresh = lookup == Lookup::Skip;
    // Boxed: a create-cluster's future nests every step of its provision, and `run` drives it on
    // the main thread's stack (an unoptimized build overflowed it with this one inline).
    let associations = async {
        if todo.is_empty() { Ok(()) } else { once_consistent(|| Box::pin(associate(aws, &rt, &todo, fresh))).await }
    };
    let is_main = async {
        if main && !table.associations().iter().any(|a| a.main() == Some(true)) {
            once_consistent(|| make_main(aws, &rt, vpc_id)).await
        } else {
            Ok(())
        }
    };
    tokio::try_join!(route, associations, is_main)?;
    Ok(rt)
}

async fn ensure_default_route(aws: &Aws, table: &RouteTable, rt: &str, target: &Target) -> AwsResult<()> {
    let existing = table.routes().iter().find(|r| r.destination_cidr_block() == Some("0.0.0.0/0"));
    let matches = existing.is_some_and(|r| match target {
        Target::Nat(n) => r.nat_gateway_id() == Some(n.as_str()),
        Target::InternetGateway(g) => r.gateway_id() == Some(g.as_str()),
    });
    if matches {
        return Ok(());
    }
    if existing.is_some() {
        let mut req = aws.ec2.replace_route().route_table_id(rt).destination_cidr_block("0.0.0.0/0");
        req = match target {
            Target::Nat(n) => req.nat_gateway_id(n),
            Target::InternetGateway(g) => req.gateway_id(g),
        };
        req.send().await.map_err(|e| classify("ReplaceRoute", e))?;
        return Ok(());
    }
    let mut req = aws.ec2.create_route().route_table_id(rt).destination_cidr_block("0.0.0.0/0");
    req = match target {
        Target::Nat(n) => req.nat_gateway_id(n),
        Target::InternetGateway(g) => req.gateway_id(g),
    };
    match req.send().await.map_err(|e| classify("CreateRoute", e)) {
        Ok(_) => Ok(()),
        Err(e) if e.code_is("RouteAlreadyExists") => Ok(()),
        Err(e) => Err(e),
    }
}

/// Associates the subnets, moving each from another table if it had one: one read of where
/// they are, then a call per subnet, side by side. `fresh` subnets (made by this execution) are
/// associated without the read; one AWS says is associated already goes the read's way.
async fn associate(aws: &Aws, rt: &str, subnets: &[&str], fresh: bool) -> AwsResult<()> {
    if fresh {
        let one = |subnet: &str| {
            let subnet = subnet.to_string();
            async move {
                let r = aws.ec2.associate_route_table().route_table_id(rt).subnet_id(&subnet).send().await;
                match r.map_err(|e| classify("AssociateRouteTable", e)) {
                    Ok(_) => Ok(None),
                    Err(e) if e.code_is("Resource.AlreadyAssociated") => Ok(Some(subnet)),
                    Err(e) => Err(e),
                }
            }
        };
        let taken: Vec<String> =
            futures::future::try_join_all(subnets.iter().map(|s| one(s))).await?.into_iter().flatten().collect();
        if taken.is_empty() {
            return Ok(());
        }
        let taken: Vec<&str> = taken.iter().map(String::as_str).collect();
        return Box::pin(associate(aws, rt, &taken, false)).await;
    }
    let current = describe(aws, filter("association.subnet-id", subnets)).await?;
    let one = |subnet: &str| {
        let found = current.iter().find_map(|t| {
            let a = t.associations().iter().find(|a| a.subnet_id() == Some(subnet))?;
            Some((t.route_table_id() == Some(rt), a.route_table_association_id().map(str::to_string)))
        });
        let subnet = subnet.to_string();
        async move {
            match found {
                // Done by an earlier pass of this same call (retried in place on NotFound).
                Some((true, _)) => {}
                Some((false, assoc)) => {
                    aws.ec2
                        .replace_route_table_association()
                        .set_association_id(assoc)
                        .route_table_id(rt)
                        .send()
                        .await
                        .map_err(|e| classify("ReplaceRouteTableAssociation", e))?;
                }
                None => {
                    aws.ec2
                        .associate_route_table()
                        .route_table_id(rt)
                        .subnet_id(&subnet)
                        .send()
                        .await
                        .map_err(|e| classify("AssociateRouteTable", e))?;
                }
            }
            Ok::<_, AwsError>(())
        }
    };
    futures::future::try_join_all(subnets.iter().map(|s| one(s))).await?;
    Ok(())
}

async fn main_association(aws: &Aws, vpc_id: &str) -> AwsResult<Option<(String, String)>> {
    let tables = describe(aws, filter("vpc-id", &[vpc_id])).await?;
    Ok(tables.iter().filter(|t| t.vpc_id() == Some(vpc_id)).find_map(|t| {
        let a = t.associations().iter().find(|a| a.main() == Some(true))?;
        Some((a.route_table_association_id()?.to_string(), t.route_table_id()?.to_string()))
    }))
}

async fn make_main(aws: &Aws, rt: &str, vpc_id: &str) -> AwsResult<()> {
    let Some((assoc, current)) = main_association(aws, vpc_id).await? else {
        return Err(missing("DescribeRouteTables", "main route table association"));
    };
    if current != rt {
        aws.ec2
            .replace_route_table_association()
            .association_id(assoc)
            .route_table_id(rt)
            .send()
            .await
            .map_err(|e| classify("ReplaceRouteTableAssociation", e))?;
    }
    Ok(())
}

/// Deletes a route table: subnet associations are removed, and if it is the main table the
/// VPC's main association goes back to a table infraflow did not create (the VPC's default).
pub async fn delete_route_table(aws: &Aws, rt: &str) -> AwsResult<bool> {
    let Some(table) =
        describe(aws, filter("route-table-id", &[rt])).await?.into_iter().find(|t| t.route_table_id() == Some(rt))
    else {
        return Ok(false);
    };
    for a in table.associations() {
        let Some(assoc) = a.route_table_association_id() else { continue };
        if a.main() == Some(true) {
            let vpc = table.vpc_id().unwrap_or_default();
            let others: Vec<RouteTable> = describe(aws, filter("vpc-id", &[vpc]))
                .await?
                .into_iter()
                .filter(|t| t.vpc_id() == Some(vpc))
                .collect();
            let fallback = others
                .iter()
                .filter(|t| t.route_table_id() != Some(rt))
                .find(|t| !t.tags().iter().any(|tag| tag.key() == Some(IDENTITY_TAG)))
                .or_else(|| others.iter().find(|t| t.route_table_id() != Some(rt)))
                .and_then(|t| t.route_table_id());
            if let Some(fallback) = fallback {
                aws.ec2
                    .replace_route_table_association()
                    .association_id(assoc)
                    .route_table_id(fallback)
                    .send()
                    .await
                    .map_err(|e| classify("ReplaceRouteTableAssociation", e))?;
            }
        } else {
            let r = aws.ec2.disassociate_route_table().association_id(assoc).send().await;
            gone_ok(r.map(|_| ()).map_err(|e| classify("DisassociateRouteTable", e)))?;
        }
    }
    gone_ok(
        aws.ec2
            .delete_route_table()
            .route_table_id(rt)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("DeleteRouteTable", e)),
    )
}

fn table_id(t: &RouteTable) -> &str {
    t.route_table_id().unwrap_or_default()
}
