//! The spans of one execution: the submission's root (ended by the execution that finishes the
//! workflow), the execution, each step and each attempt. Ids a crash must not change are derived
//! from the journal — the trace from the submission's creator (or the caller's `traceparent`),
//! an execution's span from the sequence number of its `LeaseTaken` — so every execution, on
//! any host, joins one trace. A killed execution cannot send its own span: the next one sends it,
//! rebuilt from the journal, ended without its steps.

use infraflow_journal::{WorkflowState, WorkflowView};
use infraflow_trace::{Span, SpanCtx, SpanId, Status, TraceId, TraceParent, derived_span_id, derived_trace_id};

/// What the spans of one execution share; absent when tracing is off or the trace not sampled.
pub(crate) struct ExecTrace {
    trace_id: TraceId,
    root: SpanId,
    /// The caller's span the root continues.
    caller: Option<SpanId>,
    execution_id: SpanId,
    /// Taken by `end`.
    execution: std::sync::Mutex<Option<Span>>,
    workflow: String,
    id: String,
    submitted_ms: i64,
}

fn ms_to_ns(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0) * 1_000_000
}

impl ExecTrace {
    /// The trace of the execution that just took the lease of `view`'s workflow; sends the span
    /// of the execution before it if that one ended without a record.
    pub(crate) fn begin(view: &WorkflowView) -> Option<ExecTrace> {
        let sampler = infraflow_trace::enabled()?;
        let caller = view.traceparent.as_deref().and_then(TraceParent::parse);
        let trace_id = caller.map_or_else(|| derived_trace_id(&view.creator), |c| c.trace_id);
        if !sampler.sampled(trace_id, caller.as_ref()) {
            return None;
        }
        let root = derived_span_id(&view.creator, &["submission"]);
        let this = view.executions.latest?;
        if let Some(killed) = view.executions.unended_before_latest {
            let mut span = Span::start(trace_id, Some(root), "execution")
                .attr("infraflow.workflow.id", view.id.as_str())
                .attr("infraflow.execution.ended", "without a record: the process was killed or stopped mid-way");
            span.span_id = derived_span_id(&view.creator, &["execution", &killed.start.seq.to_string()]);
            span.start_ns = ms_to_ns(killed.start.at);
            span.end_ns = ms_to_ns(killed.last_at);
            span.end(Status::Error("the execution ended without its steps: its process stopped".into()));
        }
        let mut execution = Span::start(trace_id, Some(root), "execution")
            .attr("infraflow.workflow.id", view.id.as_str())
            .attr("infraflow.workflow.name", view.workflow.as_str());
        execution.span_id = derived_span_id(&view.creator, &["execution", &this.seq.to_string()]);
        Some(ExecTrace {
            trace_id,
            root,
            caller: caller.map(|c| c.span_id),
            execution_id: execution.span_id,
            execution: std::sync::Mutex::new(Some(execution)),
            workflow: view.workflow.clone(),
            id: view.id.clone(),
            submitted_ms: view.created_at,
        })
    }

    /// The context the execution's own work (its gate, its compensation's bookkeeping) runs in.
    pub(crate) fn ctx(&self) -> SpanCtx {
        SpanCtx { trace_id: self.trace_id, span_id: self.execution_id, sampled: true }
    }

    /// The wait before this execution took the workflow's lease (`drive`: another owner's lease,
    /// an older workflow of the cluster), since `start_ns`: a span of the submission's.
    pub(crate) fn queued(&self, start_ns: u64, reason: &str) {
        let mut s = Span::start(self.trace_id, Some(self.root), "wait: the workflow's turn")
            .attr("infraflow.waited_for", reason);
        s.start_ns = start_ns;
        s.end(Status::Ok);
    }

    /// The gate passed (the account and region checked, the cluster's hold and the quota's
    /// admission taken), begun at `start_ns`: a span, named a wait when it was one.
    pub(crate) fn gate_passed(&self, start_ns: u64) {
        let waited = infraflow_trace::now_ns().saturating_sub(start_ns) > 250_000_000;
        let name = if waited { "wait: the cluster's hold and quota admission" } else { "gate" };
        let mut s = Span::start(self.trace_id, Some(self.execution_id), name);
        s.start_ns = start_ns;
        s.end(Status::Ok);
    }

    /// Ends the execution in `state`: its span is sent when it recorded how it ended (else the
    /// next execution sends it), and the root's when the workflow finished.
    pub(crate) fn end(&self, state: WorkflowState, recorded_end: bool) {
        let Some(mut execution) = self.execution.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        if !recorded_end {
            return;
        }
        let status = match state {
            WorkflowState::Completed | WorkflowState::Compensated => Status::Ok,
            WorkflowState::Paused => Status::Error("paused: the operator's `retry` resumes it".into()),
            other => Status::Error(other.to_string()),
        };
        execution.set("infraflow.workflow.state", state.to_string());
        execution.end(status.clone());
        // Sent once: only at an end `retry` cannot take further (a failed workflow can be
        // retried, and its root would be sent again).
        if matches!(state, WorkflowState::Completed | WorkflowState::Compensated) {
            let mut root = Span::start(self.trace_id, self.caller, format!("{} {}", self.workflow, self.id))
                .attr("infraflow.workflow.id", self.id.as_str())
                .attr("infraflow.workflow.name", self.workflow.as_str())
                .attr("infraflow.workflow.state", state.to_string());
            root.span_id = self.root;
            root.start_ns = ms_to_ns(self.submitted_ms);
            root.end(status);
        }
    }

    /// The span of one step's run in this execution (a compensation's undo is named so).
    pub(crate) fn step(&self, key: &str, activity: &str, compensating: bool) -> StepSpan {
        let name = if compensating { "compensation" } else { "step" };
        let span = Span::start(self.trace_id, Some(self.execution_id), name)
            .attr("infraflow.step", key)
            .attr("infraflow.activity", activity);
        StepSpan { span: Some(span) }
    }
}

/// A step's span: `ok` when it completed, else sent on drop as not completed here.
pub(crate) struct StepSpan {
    span: Option<Span>,
}

impl StepSpan {
    pub(crate) fn none() -> StepSpan {
        StepSpan { span: None }
    }

    /// The span of attempt `n`, a child of the step's.
    pub(crate) fn attempt(&self, n: u32) -> AttemptSpan {
        AttemptSpan {
            span: self
                .span
                .as_ref()
                .map(|s| Span::start(s.trace_id, Some(s.span_id), "attempt").attr("infraflow.attempt", i64::from(n))),
        }
    }

    pub(crate) fn ok(mut self) {
        if let Some(s) = self.span.take() {
            s.end(Status::Ok);
        }
    }
}

impl Drop for StepSpan {
    fn drop(&mut self) {
        if let Some(s) = self.span.take() {
            s.end(Status::Error("the step did not complete in this execution".into()));
        }
    }
}

/// An attempt's span: what the activity's AWS calls are children of.
pub(crate) struct AttemptSpan {
    span: Option<Span>,
}

impl AttemptSpan {
    /// Runs the attempt's work under this span.
    pub(crate) async fn within<F: std::future::Future>(&self, work: F) -> F::Output {
        match &self.span {
            Some(s) => {
                let ctx = SpanCtx { trace_id: s.trace_id, span_id: s.span_id, sampled: true };
                logged_in(ctx, infraflow_trace::in_span(ctx, work)).await
            }
            None => work.await,
        }
    }

    pub(crate) fn end(mut self, error: Option<String>) {
        if let Some(s) = self.span.take() {
            s.end(error.map_or(Status::Ok, Status::Error));
        }
    }
}

impl Drop for AttemptSpan {
    fn drop(&mut self) {
        if let Some(s) = self.span.take() {
            s.end(Status::Error("the attempt was abandoned".into()));
        }
    }
}

/// Runs the execution's own work (its gate, forward or compensating) under its span.
pub(crate) async fn within<F: std::future::Future>(trace: &Option<ExecTrace>, work: F) -> F::Output {
    match trace {
        Some(t) => logged_in(t.ctx(), infraflow_trace::in_span(t.ctx(), work)).await,
        None => work.await,
    }
}

/// Ends the execution's span, left in `state`: sent when the execution recorded how it ended (a
/// pause, the workflow's end), else left to the next execution.
pub(crate) fn end(trace: &Option<ExecTrace>, state: WorkflowState) {
    if let Some(t) = trace {
        t.end(state, state == WorkflowState::Paused || state.is_finished());
    }
}

/// `work` with its log lines carrying `trace_id` and `span_id` (the JSON logs' current span).
fn logged_in<F: std::future::Future>(ctx: SpanCtx, work: F) -> impl std::future::Future<Output = F::Output> {
    use tracing::Instrument;
    work.instrument(tracing::info_span!("trace", trace_id = %ctx.trace_id, span_id = %ctx.span_id))
}
