//! infraflow's traces, below the engine and the activities: what a span is, the ids a durable
//! workflow derives from its submission (so every execution joins one trace), the span a task
//! runs under, the sampler, OTLP's protobuf form and the bounded queue spans leave by. It sends
//! nothing and knows no journal and no AWS: the binary installs the exporter (`cmd/src/otlp/`).

mod context;
mod ids;
mod queue;
mod sampler;
mod span;
mod traceparent;
mod wire;

pub use context::{SpanCtx, current, in_span};
pub use ids::{SpanId, TraceId, derived_span_id, derived_trace_id};
pub use queue::{Batch, Exported, count_dropped, dropped, enabled, export, install};
pub use sampler::Sampler;
pub use span::{Attr, Kind, Span, SpanEvent, Status, now_ns};
pub use traceparent::TraceParent;
pub use wire::export_request;
