//! `OTEL_TRACES_SAMPLER` and its argument: which traces are sent. Decided on the trace id (and
//! the caller's sampled flag), so every execution of one submission decides the same.

use crate::ids::TraceId;
use crate::traceparent::TraceParent;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    /// The fraction of traces sent, on their ids.
    Ratio(f64),
    /// The caller's decision when there is a caller, else the inner sampler's.
    ParentBased(Root),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Root {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

impl Sampler {
    /// From the standard variables' values; an unknown sampler is an error naming it.
    pub fn from_env(name: Option<&str>, arg: Option<&str>) -> Result<Sampler, String> {
        let ratio = || -> Result<f64, String> {
            match arg {
                None | Some("") => Ok(1.0),
                Some(a) => a
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| format!("OTEL_TRACES_SAMPLER_ARG {a:?} is not a ratio between 0 and 1")),
            }
        };
        Ok(match name.map(str::trim).unwrap_or("parentbased_always_on") {
            "" | "parentbased_always_on" => Sampler::ParentBased(Root::AlwaysOn),
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::Ratio(ratio()?),
            "parentbased_always_off" => Sampler::ParentBased(Root::AlwaysOff),
            "parentbased_traceidratio" => Sampler::ParentBased(Root::Ratio(ratio()?)),
            other => {
                return Err(format!(
                    "OTEL_TRACES_SAMPLER {other:?} is not one infraflow knows: always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                ));
            }
        })
    }

    /// Whether the trace `id` (continuing `parent`, if any) is sent.
    pub fn sampled(&self, id: TraceId, parent: Option<&TraceParent>) -> bool {
        let ratio = |r: f64| (id.low() >> 1) < ((r * (u64::MAX >> 1) as f64) as u64) || r >= 1.0;
        match (self, parent) {
            (Sampler::AlwaysOn, _) => true,
            (Sampler::AlwaysOff, _) => false,
            (Sampler::Ratio(r), _) => ratio(*r),
            (Sampler::ParentBased(_), Some(p)) => p.sampled,
            (Sampler::ParentBased(Root::AlwaysOn), None) => true,
            (Sampler::ParentBased(Root::AlwaysOff), None) => false,
            (Sampler::ParentBased(Root::Ratio(r)), None) => ratio(*r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::derived_trace_id;

    #[test]
    fn the_sampler_follows_the_caller_and_decides_alike_for_one_trace() {
        let s = Sampler::from_env(None, None).unwrap();
        let off = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!s.sampled(derived_trace_id("x"), Some(&off)));
        assert!(s.sampled(derived_trace_id("x"), None));
        let half = Sampler::from_env(Some("traceidratio"), Some("0.5")).unwrap();
        let sent = (0..1000).filter(|i| half.sampled(derived_trace_id(&i.to_string()), None)).count();
        assert!((350..650).contains(&sent), "{sent}");
        assert_eq!(half.sampled(derived_trace_id("7"), None), half.sampled(derived_trace_id("7"), None));
        assert!(Sampler::from_env(Some("sometimes"), None).is_err());
        assert!(Sampler::from_env(Some("traceidratio"), Some("2")).is_err());
    }
}
