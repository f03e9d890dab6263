//! One adaptive token bucket: the pace of one request class (or one API of it), shared by every
//! workflow of the process. It starts as an idle account's bucket is, full and at the configured
//! rate, admits at that rate after a share of the burst, slows below what AWS admitted lately on
//! each throttle AWS answers (others on the account are using the same bucket) and creeps back.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A request class's limit: a bucket of `burst` tokens refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    pub burst: f64,
    pub per_second: f64,
}

/// A throttle sets the rate to this share of what AWS admitted lately: the account's bucket is
/// shared, and what it admitted is the share it gave this process. (Half, not TCP's 0.7: the
/// tuning in `scripts/pacing-sim.py` — 0.7 leaves 3 daemons started together at 4-7% throttled.)
const CUT: f64 = 0.5;
/// Throttles closer together than this are one congestion event: the requests already in flight
/// when AWS's bucket ran dry come back throttled together, and one cut answers them all.
const ONE_EVENT: Duration = Duration::from_secs(1);
/// What AWS admitted is measured over this window.
const WINDOW: Duration = Duration::from_secs(3);
/// Once throttled, the rate climbs back by this share of the limit per second (half the limit in
/// 100 s): slowly, because every probe past the process's share of the account is a throttle
/// someone on the account pays for.
const CREEP_PER_SECOND: f64 = 0.005;
/// Until a throttle has measured the process's share, the rate climbs back this much faster (from
/// a quarter to the limit in 15 s): a cut made on no measure is a guess, and the burst another
/// process spent (a `submit` just before) is refilled within a second. Measured: a daemon
/// throttled on its first Route53 requests, right after twelve `submit`s drained the account's
/// bucket, crept back at the measured pace and ran a fleet's teardowns at 1-3 requests a second:
/// 87 s where 45 s do. Daemons that contend learn their share at their next throttle, which is
/// measured: three of them, 5-6 of ~285 requests throttled (4-8 before; 9-14 at 20 times).
const UNMEASURED_CREEP_FACTOR: f64 = 10.0;
/// Fewer requests than this admitted over `WINDOW` say how long the class has been busy (a
/// process just started, a class just woken), not what share of the account AWS gives it: a
/// throttle then cuts the rate to a quarter (two cuts). Measured: twelve teardown `submit`s one
/// after another, each throttled on a first Route53 read went to the floor, a request per 10 s:
/// 24 s for the twelve, 9 s with this; three daemons on one account as throttled as before
/// (4-5 of ~285 requests) and quicker (`aws_pacing`).
const MEASURED: usize = 3;
/// Never slower than this (a request per 10 s): a throttle storm must not stall a class.
const FLOOR_PER_SECOND: f64 = 0.1;
/// The share of AWS's burst the process may bank while its class is idle, at the full rate (the
/// capacity shrinks with the rate: at the start, and after a throttle, it is a third or less).
/// Workflows alternate between classes, and AWS's bucket refills while a class rests; a process
/// that can bank (nearly) what AWS banks spends that refill when the class is wanted again. Not
/// all of it: the tenth left over absorbs requests that arrive at AWS closer together than they
/// left.
const BURST_SHARE: f64 = 0.9;

#[derive(Debug)]
struct State {
    /// The current rate, at most the limit's.
    rate: f64,
    /// Tokens in the bucket. Callers short of one sleep and ask again rather than reserve a
    /// future token: a reservation made at the old rate would outlive a cut.
    tokens: f64,
    refilled: Instant,
    last_cut: Option<Instant>,
    /// When AWS admitted this class's requests, over the last `WINDOW`.
    admitted: VecDeque<Instant>,
    started: Instant,
    /// Whether a throttle has measured the process's share (what AWS admitted it): until then
    /// the rate climbs back `UNMEASURED_CREEP_FACTOR` times faster.
    measured: bool,
}

#[derive(Debug)]
pub struct Bucket {
    limit: Limit,
    state: Mutex<State>,
}

impl Bucket {
    pub fn new(limit: Limit) -> Bucket {
        let now = Instant::now();
        Bucket {
            limit,
            state: Mutex::new(State {
                // What an idle account allows: a lone process never waits for what it need not.
                // Daemons started together learn of each other from their first throttles.
                rate: limit.per_second,
                tokens: Bucket::capacity(limit, limit.per_second),
                refilled: now,
                last_cut: None,
                admitted: VecDeque::new(),
                started: now,
                measured: false,
            }),
        }
    }

    /// The tokens this process may hold at `rate`: its share of the burst, shrunk with the rate.
    fn capacity(limit: Limit, rate: f64) -> f64 {
        (limit.burst * BURST_SHARE * rate / limit.per_second).max(1.0)
    }

    /// Takes a token if one is there; else says how long until one will be (at today's rate).
    pub fn take(&self, now: Instant) -> Result<(), Duration> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.refill(&mut s, now);
        if s.tokens >= 1.0 {
            s.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - s.tokens) / s.rate))
        }
    }

    /// AWS admitted a request of this class.
    pub fn admitted(&self, now: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.admitted.push_back(now);
        Bucket::forget_old(&mut s, now);
    }

    /// AWS throttled a request of this class: others on the account use the same bucket. Slow
    /// to half of what AWS admitted lately, or of the rate before the share is measured (once
    /// per congestion event), and spend the credit.
    pub fn throttled(&self, now: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.refill(&mut s, now);
        if s.last_cut.is_some_and(|t| now.duration_since(t) < ONE_EVENT) {
            return;
        }
        Bucket::forget_old(&mut s, now);
        let window = now.duration_since(s.started).min(WINDOW).as_secs_f64().max(0.5);
        let measured = s.admitted.len() >= MEASURED;
        let share = if measured { s.rate.min(s.admitted.len() as f64 / window) } else { CUT * s.rate };
        s.measured |= measured;
        s.rate = (CUT * share).max(FLOOR_PER_SECOND);
        s.tokens = s.tokens.min(0.0);
        s.last_cut = Some(now);
    }

    fn forget_old(s: &mut State, now: Instant) {
        while s.admitted.front().is_some_and(|t| now.duration_since(*t) > WINDOW) {
            s.admitted.pop_front();
        }
    }

    /// The rate now, in requests per second.
    #[cfg(test)]
    pub fn rate(&self) -> f64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).rate
    }

    fn refill(&self, s: &mut State, now: Instant) {
        let dt = now.saturating_duration_since(s.refilled).as_secs_f64();
        s.refilled = s.refilled.max(now);
        if dt <= 0.0 {
            return;
        }
        // Tokens accrue at the rate of the interval; the rate then creeps up for the next one.
        s.tokens = (s.tokens + dt * s.rate).min(Bucket::capacity(self.limit, s.rate));
        let creep = if s.measured { CREEP_PER_SECOND } else { CREEP_PER_SECOND * UNMEASURED_CREEP_FACTOR };
        s.rate = (s.rate + dt * creep * self.limit.per_second).min(self.limit.per_second);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(burst: f64, per_second: f64) -> Bucket {
        Bucket::new(Limit { burst, per_second })
    }

    #[test]
    fn an_idle_accounts_share_of_the_burst_goes_out_at_once_then_tokens_come_at_the_limit() {
        let b = bucket(60.0, 6.0);
        let t = Instant::now();
        // The process's share of a full bucket: nine tenths of 60 tokens.
        let taken = (0..80).take_while(|_| b.take(t).is_ok()).count();
        assert_eq!(taken, 54, "{taken} taken at once");
        let wait = b.take(t).unwrap_err().as_secs_f64();
        assert!(wait > 0.0 && wait <= 1.0 / 6.0 + 1e-9, "the next token at 6 a second: {wait}");
        assert_eq!(b.rate(), 6.0, "at the limit from the start");
    }

    #[test]
    fn a_throttle_slows_to_less_than_aws_admitted_once_per_event() {
        let b = bucket(20.0, 5.0);
        let t = Instant::now();
        // AWS admitted 6 requests in the last 3 s: 2 a second.
        for i in 0..6 {
            b.admitted(t + Duration::from_millis(500 * i));
        }
        let at = t + Duration::from_secs(3);
        b.throttled(at);
        b.throttled(at + Duration::from_millis(300));
        assert!((b.rate() - 1.0).abs() < 0.01, "half the 2 a second admitted, cut once: {}", b.rate());
        assert!(b.take(at + Duration::from_millis(300)).is_err(), "no burst credit is left");
        b.throttled(at + Duration::from_secs(2));
        assert!(b.rate() < 1.0, "a later event cuts again: {}", b.rate());
    }

    #[test]
    fn a_throttle_before_the_share_is_measured_cuts_the_rate_to_a_quarter() {
        // A process that has sent one Route53 request meets a bucket another process drained.
        let b = bucket(5.0, 5.0);
        let t = Instant::now();
        b.admitted(t);
        b.throttled(t + Duration::from_millis(100));
        assert!((b.rate() - 1.25).abs() < 0.01, "a quarter of the rate, not half of one request: {}", b.rate());
    }

    #[test]
    fn the_rate_creeps_back_to_the_limit_and_not_past_it() {
        let b = bucket(20.0, 5.0);
        let t = Instant::now();
        for i in 0..15 {
            b.admitted(t + Duration::from_millis(200 * i));
        }
        b.throttled(t + Duration::from_secs(3));
        let _ = b.take(t + Duration::from_secs(13));
        let mid = b.rate();
        assert!(mid > 1.7 && mid < 5.0, "partway back after 10 s: {mid}");
        let _ = b.take(t + Duration::from_secs(300));
        assert!((b.rate() - 5.0).abs() < 1e-9, "back at the limit: {}", b.rate());
    }

    #[test]
    fn after_a_throttle_on_no_measure_the_rate_is_back_within_seconds_and_after_a_measured_one_slowly() {
        // A process throttled on its first request: another drained the bucket just before.
        let guessed = bucket(5.0, 5.0);
        let t = Instant::now();
        guessed.throttled(t);
        assert!((guessed.rate() - 1.25).abs() < 0.01);
        let _ = guessed.take(t + Duration::from_secs(16));
        assert!((guessed.rate() - 5.0).abs() < 1e-9, "back at the limit in 16 s: {}", guessed.rate());
        // One that AWS admitted 2 a second for 3 s, then throttled: its share, learnt.
        let learnt = bucket(5.0, 5.0);
        for i in 0..6 {
            learnt.admitted(t + Duration::from_millis(500 * i));
        }
        learnt.throttled(t + Duration::from_secs(3));
        let _ = learnt.take(t + Duration::from_secs(19));
        assert!(learnt.rate() < 1.5, "still near its share 16 s on: {}", learnt.rate());
    }

    #[test]
    fn a_throttle_storm_never_stops_the_class() {
        let b = bucket(1.0, 1.0);
        let t = Instant::now();
        for i in 0..100 {
            b.throttled(t + Duration::from_secs(3 * i));
        }
        assert!(b.rate() >= FLOOR_PER_SECOND);
    }
}
