//! Concurrent branches of a workflow body: each combinator waits for *every* branch, so that
//! every step in flight is journaled before the workflow fails, and returns the most telling
//! error (`StepError::severity`).

use crate::error::StepError;

/// Runs two different branches concurrently and waits for both, so that every step in flight is
/// journaled before the workflow fails; returns the more telling error.
pub async fn join_pair<A, B>(
    a: impl Future<Output = Result<A, StepError>>,
    b: impl Future<Output = Result<B, StepError>>,
) -> Result<(A, B), StepError> {
    match futures::join!(a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
        (Err(x), Err(y)) => Err(if y.severity() > x.severity() { y } else { x }),
    }
}

/// Runs independent branches concurrently and waits for *all* of them, so that every step in
/// flight is journaled before the workflow fails; returns the most telling error.
pub async fn join_branches<T, Fut>(branches: impl IntoIterator<Item = Fut>) -> Result<Vec<T>, StepError>
where
    Fut: Future<Output = Result<T, StepError>>,
{
    let results = futures::future::join_all(branches).await;
    let mut ok = Vec::with_capacity(results.len());
    let mut worst: Option<StepError> = None;
    for r in results {
        match r {
            Ok(v) => ok.push(v),
            Err(e) => {
                if worst.as_ref().is_none_or(|w| e.severity() > w.severity()) {
                    worst = Some(e);
                }
            }
        }
    }
    match worst {
        Some(e) => Err(e),
        None => Ok(ok),
    }
}
