//! `expiresIn` (`6h`, `3d`): the expiration date a create workflow stamps on what it makes, as
//! HyperShift CI's `expirationDate` tag (RFC 3339, UTC), counted from the workflow's submission.

use infraflow_engine::{InputError, WfCtx};

/// The longest lifetime accepted: a year (a typo of `3000d` is refused, not obeyed).
const MAX_SECS: u64 = 366 * 86_400;

/// `expiresIn`'s seconds: a whole number and one unit of `m`, `h` or `d` (`90m`, `6h`, `3d`).
pub fn parse(field: &str, v: &str) -> Result<u64, InputError> {
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().map_err(|_| {
        InputError::field(field, format!("{v:?} is not a duration: write a number and a unit, e.g. 6h or 3d"))
    })?;
    let unit_secs = match unit {
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(InputError::field(field, format!("{v:?} has no known unit: use m, h or d (e.g. 6h or 3d)"))),
    };
    let secs = n.saturating_mul(unit_secs);
    if secs == 0 || secs > MAX_SECS {
        return Err(InputError::field(field, format!("{v:?} must be more than nothing and at most 366d")));
    }
    Ok(secs)
}

/// Checks `expiresIn` beside the additional tags: one way to say when, not two.
pub fn validate(
    expires_in: Option<&str>,
    additional_tags: &std::collections::BTreeMap<String, String>,
) -> Result<(), InputError> {
    let Some(v) = expires_in else { return Ok(()) };
    parse("expiresIn", v)?;
    if additional_tags.contains_key(infraflow_activities::tags::EXPIRATION_TAG) {
        return Err(InputError::field("expiresIn", "additionalTags already sets expirationDate: give one of the two"));
    }
    Ok(())
}

/// `expiresIn` on a workflow that makes a part of a cluster (a node pool, a private link): refused.
/// A cluster expires as a whole, by the date its anchor carries; a part's date would either be
/// read as the cluster's (a burst pool "for 6h" tearing down a long-lived cluster, review F2) or
/// mean nothing. Runs journaled with it before keep running; the janitor reads no part's date.
pub fn refuse_on_a_part(expires_in: Option<&str>, part: &str) -> Result<(), InputError> {
    match expires_in {
        None => Ok(()),
        Some(_) => Err(InputError::field(
            "expiresIn",
            format!(
                "{part} does not expire on its own: a cluster expires as a whole, by the expiresIn given to provision-infra or create-cluster; drop the field"
            ),
        )),
    }
}

/// The `expirationDate` of what this workflow creates: its submission time plus `expires_in`
/// (validated at submit), the same on every replay and resume.
pub fn date(ctx: &WfCtx, expires_in: Option<&str>) -> Option<String> {
    let secs = parse("expiresIn", expires_in?).ok()?;
    Some(rfc3339(ctx.submitted_ms() / 1000 + secs as i64))
}

/// Seconds since the epoch as RFC 3339 in UTC (`2026-11-25T19:00:00Z`).
pub fn rfc3339(unix: i64) -> String {
    let (days, rem) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Seconds since the epoch of an RFC 3339 time (`Z` or `±hh:mm`, fractions ignored); None if
/// it is not one. What the janitor reads off `expirationDate` tags, whoever wrote them.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.find(|c: char| !c.is_ascii_digit()).unwrap_or(frac.len());
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let (sign, hm) = match rest.as_bytes().first()? {
                b'+' => (1, &rest[1..]),
                b'-' => (-1, &rest[1..]),
                _ => return None,
            };
            let (oh, om) = hm.split_once(':')?;
            if oh.len() != 2 || om.len() != 2 {
                return None;
            }
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60)
        }
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset)
}

/// Howard Hinnant's `civil_from_days`: the proleptic Gregorian date of a day count.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The inverse of `civil_from_days`.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339_utc_and_read_back() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_633_200), "2026-11-25T19:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        for t in [0, 951_782_400, 1_795_633_200, 4_102_444_799] {
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
        }
        assert_eq!(parse_rfc3339("2026-11-25T21:00:00+02:00"), Some(1_795_633_200));
        assert_eq!(parse_rfc3339("2026-11-25T19:00:00.123Z"), Some(1_795_633_200));
        for bad in ["", "tomorrow", "2026-13-01T00:00:00Z", "2026-11-25T17:00:00", "2026-11-25T17:00:00+0200"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn expires_in_takes_minutes_hours_and_days_up_to_a_year() {
        assert_eq!(parse("expiresIn", "90m").unwrap(), 5_400);
        assert_eq!(parse("expiresIn", "6h").unwrap(), 21_600);
        assert_eq!(parse("expiresIn", "3d").unwrap(), 259_200);
        for bad in ["", "6", "h", "0h", "6w", "-1d", "367d", "6 h"] {
            let e = parse("expiresIn", bad).unwrap_err().to_string();
            assert!(e.contains("expiresIn"), "{bad}: {e}");
        }
    }
}
