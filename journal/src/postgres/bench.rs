//! The raw ceiling of a PostgreSQL server for benchmarks: single-row INSERT transactions from
//! one or several clients, as pgbench measures it, so engine figures read as a fraction of it.

use std::time::Instant;

use super::target::PgTarget;
use crate::error::Result;

/// Commits `each` single-row INSERT transactions from each of `clients` connections into a
/// scratch table (dropped afterwards) and returns transactions per second.
pub async fn raw_commit_ceiling(target: &PgTarget, clients: u32, each: u32) -> Result<f64> {
    let mut conns = Vec::new();
    for _ in 0..clients {
        let (client, connection) = target.connect(None).await?;
        tokio::spawn(connection);
        conns.push(client);
    }
    conns[0]
        .batch_execute(
            "DROP TABLE IF EXISTS infraflow_bench_ceiling;
             CREATE TABLE infraflow_bench_ceiling (id BIGSERIAL PRIMARY KEY, at BIGINT NOT NULL, data TEXT NOT NULL)",
        )
        .await?;
    let start = Instant::now();
    let runs = conns.iter().map(|c| async move {
        let insert = c.prepare("INSERT INTO infraflow_bench_ceiling (at, data) VALUES ($1, $2)").await?;
        for i in 0..each {
            let (at, data) = (i64::from(i), "{\"type\":\"step_completed\"}");
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&at, &data];
            c.execute(&insert, &params).await?;
        }
        Ok::<_, tokio_postgres::Error>(())
    });
    for r in futures::future::join_all(runs).await {
        r?;
    }
    let rate = f64::from(clients * each) / start.elapsed().as_secs_f64();
    conns[0].batch_execute("DROP TABLE infraflow_bench_ceiling").await?;
    Ok(rate)
}
