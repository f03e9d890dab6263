//! Retry policies: exponential backoff with a cap, a bounded number of attempts, and jitter.
//!
//! Why backoffs are capped on resume: a journaled next-attempt time further away than the policy's
//! `max_interval` (a clock stepped back, another host's clock) is cut to that interval (where
//! `context` resumes a step). Cancel and stop wake a step sleeping in backoff at once (the waiter
//! registers before the flags are read: `signals`).

use std::time::Duration;

#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    pub initial: Duration,
    pub coefficient: f64,
    pub max_interval: Duration,
    /// Attempts in all, the first included; when spent, the workflow pauses.
    pub max_attempts: u32,
    /// Fraction of each delay drawn at random (0.2 = ±20%), so retrying clients spread out.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_millis(500),
            coefficient: 2.0,
            max_interval: Duration::from_secs(30),
            max_attempts: 8,
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// The wait after the `failures`-th failed attempt (1-based).
    pub fn delay_after(&self, failures: u32) -> Duration {
        let exp = self.coefficient.powi(failures.saturating_sub(1).min(64) as i32);
        let base = (self.initial.as_secs_f64() * exp).min(self.max_interval.as_secs_f64());
        let spread = base * self.jitter.clamp(0.0, 1.0);
        let jittered = base - spread + 2.0 * spread * fastrand::f64();
        Duration::from_secs_f64(jittered.max(0.0))
    }

    /// How long the policy waits in all before giving up, without jitter: the wall-clock budget
    /// its attempts stand for.
    pub fn nominal_budget(&self) -> Duration {
        let plain = RetryPolicy { jitter: 0.0, ..self.clone() };
        (1..self.max_attempts).map(|n| plain.delay_after(n)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_by_the_coefficient_and_stop_at_the_cap() {
        let p = RetryPolicy { jitter: 0.0, ..RetryPolicy::default() };
        assert_eq!(p.delay_after(1), Duration::from_millis(500));
        assert_eq!(p.delay_after(2), Duration::from_millis(1000));
        assert_eq!(p.delay_after(3), Duration::from_millis(2000));
        assert_eq!(p.delay_after(40), Duration::from_secs(30));
    }

    #[test]
    fn jitter_stays_within_its_band() {
        let p = RetryPolicy::default();
        for _ in 0..1000 {
            let d = p.delay_after(2).as_secs_f64();
            assert!((0.8..=1.2).contains(&d), "{d}");
        }
    }
}
