//! The values a configuration writes as text: durations, rates, status lists.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A duration written `"250ms"`, `"30s"`, `"5m"` or `"1h"` (a whole number and a unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dur(pub Duration);

/// A rate written `"25/s"`, `"600/m"`, `"1/h"` or `"5/100ms"`: so many requests per period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateSpec {
    /// Requests per period: at least 1.
    pub count: u32,
    /// The period.
    pub per: Duration,
}

/// Statuses written as codes and ranges: `[429, "500-599"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Statuses(pub Vec<StatusRange>);

/// One status (`503`) or an inclusive range of them (`"500-599"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusRange {
    /// The first status.
    pub from: u16,
    /// The last status, `from` for one.
    pub to: u16,
}

// === impl Dur ===

impl Dur {
    /// `d`.
    pub const fn new(d: Duration) -> Self {
        Self(d)
    }
}

impl From<Duration> for Dur {
    fn from(d: Duration) -> Self {
        Self(d)
    }
}

impl FromStr for Dur {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(Self)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_duration(f, self.0)
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{s:?} has no unit: write \"250ms\", \"30s\", \"5m\" or \"1h\""))?;
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "{s:?} is not a duration: write a whole number and a unit, \"250ms\", \"30s\""
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: the number is too large"))?;
    let per_unit = match unit {
        "ms" => Duration::from_millis(1),
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => {
            return Err(format!(
                "{s:?} has an unknown unit {unit:?}: use ms, s, m or h"
            ));
        }
    };
    per_unit
        .checked_mul(u32::try_from(n).map_err(|_| format!("{s:?}: the number is too large"))?)
        .ok_or_else(|| format!("{s:?}: too long"))
}

fn write_duration(f: &mut fmt::Formatter<'_>, d: Duration) -> fmt::Result {
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        // Finer than a millisecond cannot be written back; round up so that nothing shrinks
        // to zero.
        return write!(f, "{}ms", ms + 1);
    }
    if ms == 0 {
        return f.write_str("0s");
    }
    if ms.is_multiple_of(3_600_000) {
        write!(f, "{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        write!(f, "{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        write!(f, "{}s", ms / 1000)
    } else {
        write!(f, "{ms}ms")
    }
}

// === impl RateSpec ===

impl RateSpec {
    /// `count` requests per `per`.
    pub const fn new(count: u32, per: Duration) -> Self {
        Self { count, per }
    }
}

impl FromStr for RateSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (count, per) = s.trim().split_once('/').ok_or_else(|| {
            format!("{s:?} is not a rate: write so many per period, \"25/s\", \"600/m\"")
        })?;
        let count: u32 = count
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: {count:?} is not a whole number of requests"))?;
        let per = per.trim();
        // "25/s" is 25 per one second; "5/100ms" is 5 per 100 ms.
        let per = if per.starts_with(|c: char| c.is_ascii_digit()) {
            parse_duration(per)?
        } else {
            parse_duration(&format!("1{per}"))?
        };
        Ok(Self { count, per })
    }
}

impl fmt::Display for RateSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per {
            d if d == Duration::from_secs(1) => Some("s"),
            d if d == Duration::from_secs(60) => Some("m"),
            d if d == Duration::from_secs(3600) => Some("h"),
            d if d == Duration::from_millis(1) => Some("ms"),
            _ => None,
        };
        match unit {
            Some(unit) => write!(f, "{}/{unit}", self.count),
            None => write!(f, "{}/{}", self.count, Dur(self.per)),
        }
    }
}

// === impl StatusRange ===

impl StatusRange {
    /// One status.
    pub const fn one(status: u16) -> Self {
        Self {
            from: status,
            to: status,
        }
    }

    /// Every status of the range, when each is a status (100 to 999) and the range runs
    /// forward.
    pub(crate) fn statuses(&self) -> Result<Vec<http::StatusCode>, String> {
        if self.from > self.to {
            return Err(format!("the range {self} runs backwards"));
        }
        (self.from..=self.to)
            .map(|code| {
                http::StatusCode::from_u16(code).map_err(|_| format!("{code} is not a status"))
            })
            .collect()
    }
}

impl FromStr for StatusRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let num = |t: &str| {
            t.trim()
                .parse::<u16>()
                .map_err(|_| format!("{s:?} is not a status or a range: write 503 or \"500-599\""))
        };
        match s.split_once('-') {
            Some((from, to)) => Ok(Self {
                from: num(from)?,
                to: num(to)?,
            }),
            None => num(s).map(Self::one),
        }
    }
}

impl fmt::Display for StatusRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.from == self.to {
            write!(f, "{}", self.from)
        } else {
            write!(f, "{}-{}", self.from, self.to)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_trip() {
        for (text, d) in [
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("5m", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(text.parse::<Dur>().unwrap(), Dur(d));
            assert_eq!(Dur(d).to_string(), text);
        }
        assert_eq!("1500ms".parse::<Dur>().unwrap().to_string(), "1500ms");
        for bad in [
            "",
            "s",
            "30",
            "30 sec",
            "-1s",
            "1.5s",
            "99999999999999999999s",
        ] {
            assert!(bad.parse::<Dur>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rates_round_trip() {
        assert_eq!(
            "25/s".parse::<RateSpec>().unwrap(),
            RateSpec::new(25, Duration::from_secs(1))
        );
        assert_eq!(
            "5/100ms".parse::<RateSpec>().unwrap(),
            RateSpec::new(5, Duration::from_millis(100))
        );
        for text in ["25/s", "600/m", "1/h", "5/100ms"] {
            assert_eq!(text.parse::<RateSpec>().unwrap().to_string(), text);
        }
        for bad in ["25", "/s", "x/s", "25/parsec", "25/"] {
            assert!(bad.parse::<RateSpec>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn status_ranges() {
        assert_eq!(
            "500-599".parse::<StatusRange>().unwrap(),
            StatusRange { from: 500, to: 599 }
        );
        assert_eq!("503".parse::<StatusRange>().unwrap(), StatusRange::one(503));
        assert!(
            "599-500"
                .parse::<StatusRange>()
                .unwrap()
                .statuses()
                .is_err()
        );
        assert!("5xx".parse::<StatusRange>().is_err());
    }
}
