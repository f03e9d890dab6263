//! The span a task runs under: set by the engine around an execution, a step attempt or a
//! compensation, read by whatever that work calls (an AWS call's span is its child).

use std::future::Future;

use crate::ids::{SpanId, TraceId};

/// A trace, the span work runs under, and whether the trace is sampled (exported).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanCtx {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: bool,
}

tokio::task_local! {
    static CURRENT: SpanCtx;
}

/// The span the calling task runs under, if any.
pub fn current() -> Option<SpanCtx> {
    CURRENT.try_with(|c| *c).ok()
}

/// Runs `fut` under `ctx`.
pub fn in_span<F: Future>(ctx: SpanCtx, fut: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(ctx, fut)
}
