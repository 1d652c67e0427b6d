//! The Lua scripts that run on the Redis server, their arguments, and what their replies mean.
//!
//! Every time inside Redis is the server's own clock (`TIME`), in microseconds since the epoch
//! (below 2^53, so Lua's numbers hold them exactly). Nothing sent to Redis is a moment of the
//! caller's clock: a decision carries only relative durations (the interval, the tolerance, the
//! longest wait) and answers with a relative wait, which the caller adds to its own
//! [`Instant`]. Replicas whose clocks disagree therefore still share one bucket correctly.

use courier_ratelimit::{Decision, Denial, Grant, Quota};
use std::sync::LazyLock;
use std::time::Duration;
use tokio::time::Instant;

/// GCRA with reservation (the same algorithm as the in-process store, see
/// `courier_ratelimit`), plus the shared park, in one atomic step.
///
/// KEYS: the bucket's TAT, the key's park (both microseconds on the server's clock).
/// ARGV: interval T, tolerance tau, longest accepted wait, a park known to the caller only
/// (microseconds from now; 0 for none).
/// Reply: `{admitted, wait, parked, ticket}`: `wait` until the slot (or until the first free
/// slot, when refused); `parked` when a park is what holds the key; `ticket` the TAT written.
pub(crate) const GCRA_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local cap = 4503599627370496
local parked = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local hold = math.max(parked, now + tonumber(ARGV[4]))
local eff = math.max(now, hold)
local start = math.max(eff, tat - tau)
local wait = math.min(start - now, cap)
if wait > max_wait then
  local by_park = 0
  if hold > now and hold >= tat - tau then by_park = 1 end
  return {0, wait, by_park, 0}
end
local new_tat = math.min(math.max(tat, eff) + interval, now + cap)
local ttl = math.max(1, math.ceil((new_tat - now) / 1000))
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', string.format('%.0f', ttl))
return {1, wait, 0, new_tat}
";

/// Parks a key until `ARGV[1]` microseconds from now on the server's clock, unless it is
/// parked longer already. KEYS: the park.
pub(crate) const PARK_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local wait = tonumber(ARGV[1])
local untl = now + wait
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if untl <= cur then return 0 end
local ttl = math.max(1, math.ceil(wait / 1000))
redis.call('SET', KEYS[1], string.format('%.0f', untl), 'PX', string.format('%.0f', ttl))
return 1
";

/// Gives a reserved slot back: the TAT goes back one interval if it is still the ticket (no
/// later reservation stacked on it) and still has a time to live (a key in its last
/// millisecond, `PTTL` 0, is left to expire: it is never written back without an expiry).
/// KEYS: the TAT. ARGV: the ticket, the interval.
pub(crate) const GIVE_BACK_LUA: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[1]) then return 0 end
local back = string.format('%.0f', tonumber(ARGV[1]) - tonumber(ARGV[2]))
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then return 0 end
redis.call('SET', KEYS[1], back, 'PX', ttl)
return 1
";

/// Forgets a bucket whose last reservation is still the caller's: deletes the TAT if it is
/// still the ticket (no reservation stacked on it since, by any replica). KEYS: the TAT. ARGV:
/// the ticket.
pub(crate) const FORGET_LUA: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
";

pub(crate) static GCRA: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(GCRA_LUA));
pub(crate) static PARK: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PARK_LUA));
pub(crate) static GIVE_BACK: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(GIVE_BACK_LUA));
pub(crate) static FORGET: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(FORGET_LUA));

/// 2^52 microseconds (about 142 years): every duration sent to Redis is capped here, so sums
/// with the server's time stay below 2^53, where Lua's numbers are exact integers.
pub(crate) const CAP_US: u64 = 1 << 52;

/// Marks a ticket as written by Redis (the in-process store's tickets stay below it).
pub(crate) const REDIS_TICKET: u64 = 1 << 63;

/// A duration in whole microseconds, rounded down, capped at [`CAP_US`].
pub(crate) fn micros_floor(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).min(CAP_US)
}

/// A duration in whole microseconds, rounded up, capped at [`CAP_US`].
pub(crate) fn micros_ceil(d: Duration) -> u64 {
    let us = d.as_nanos().div_ceil(1_000);
    u64::try_from(us).unwrap_or(u64::MAX).min(CAP_US)
}

/// The arguments of one decision: relative durations only, never a clock reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GcraCall {
    pub(crate) tat_key: String,
    pub(crate) park_key: String,
    /// ARGV: interval, tolerance, longest wait, local park; all microseconds.
    pub(crate) args: [u64; 4],
}

impl GcraCall {
    /// The call for `quota`. The interval is rounded up to whole microseconds (a rate can only
    /// get slower by it, never faster; rates above 1 000 000 per second count as that).
    pub(crate) fn new(
        (tat_key, park_key): (String, String),
        quota: Quota,
        max_wait: Duration,
        local_park: Duration,
    ) -> Self {
        let interval = micros_ceil(quota.rate().interval()).max(1);
        let tolerance = u64::from(quota.burst().get() - 1)
            .saturating_mul(interval)
            .min(CAP_US);
        Self {
            tat_key,
            park_key,
            args: [
                interval,
                tolerance,
                micros_floor(max_wait),
                micros_ceil(local_park),
            ],
        }
    }

    /// The probe's call, on the key `courier-probe` under `prefix`: one microsecond's interval
    /// and any wait accepted, so that it always reserves, and so writes, on the server (a key
    /// that lives a millisecond). A Redis that runs it runs every decision.
    pub(crate) fn probe(prefix: &str) -> Self {
        let (tat_key, park_key) = crate::key::key_names(prefix, "courier-probe");
        Self {
            tat_key,
            park_key,
            args: [1, 0, CAP_US, 0],
        }
    }

    /// A probe on keys of their own in the same Redis Cluster slot as `(tat_key, park_key)` (the
    /// same hash tag), so that it tells whether the node that failed that key's decision
    /// answers again. It never touches the bucket.
    pub(crate) fn probe_beside((tat_key, park_key): (String, String)) -> Self {
        let beside = |name: &str, suffix: &str| {
            let stem = name.strip_suffix(suffix).unwrap_or(name);
            format!("{stem}:probe{suffix}")
        };
        Self {
            tat_key: beside(&tat_key, ":tat"),
            park_key: beside(&park_key, ":park"),
            args: [1, 0, CAP_US, 0],
        }
    }

    /// The interval in microseconds, as sent.
    pub(crate) fn interval_us(&self) -> u64 {
        self.args[0]
    }
}

/// The GCRA script's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) admitted: bool,
    pub(crate) wait_us: u64,
    pub(crate) parked: bool,
    pub(crate) ticket: u64,
}

/// A reply that is not what the script returns (another program wrote the key, or a proxy
/// mangled it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadReply(pub(crate) String);

impl std::fmt::Display for BadReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unexpected reply from the rate limit script: {}", self.0)
    }
}

impl std::error::Error for BadReply {}

impl Reply {
    /// Reads the script's four integers. Negative waits (impossible from the script) count as
    /// zero; anything else malformed is an error.
    pub(crate) fn from_values(values: &[i64]) -> Result<Self, BadReply> {
        let &[admitted, wait, parked, ticket] = values else {
            return Err(BadReply(format!("{} values instead of 4", values.len())));
        };
        let flag = |v: i64, what: &str| match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(BadReply(format!("{what} = {v}"))),
        };
        Ok(Self {
            admitted: flag(admitted, "admitted")?,
            wait_us: u64::try_from(wait).unwrap_or(0).min(CAP_US),
            parked: flag(parked, "parked")?,
            ticket: u64::try_from(ticket).unwrap_or(0).min(CAP_US),
        })
    }

    /// The decision, on the caller's clock: the slot starts `wait` after `now`, the moment the
    /// reply arrived. The server's clock never leaves the server, so no two clocks need agree;
    /// a slot is only ever placed later than the server reserved it (by the reply's travel
    /// time), never earlier.
    pub(crate) fn into_decision(self, now: Instant) -> Decision {
        let wait = Duration::from_micros(self.wait_us);
        if self.admitted {
            Decision::Admit(Grant::new(now + wait, self.ticket | REDIS_TICKET))
        } else {
            Decision::Deny(Denial::new(wait).parked(self.parked))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_ratelimit::Rate;
    use std::num::NonZeroU32;

    fn quota(rps: f64, burst: u32) -> Quota {
        Quota::new(
            Rate::per_second(rps).unwrap(),
            NonZeroU32::new(burst).unwrap(),
        )
    }

    /// Skew: what goes to Redis is relative durations only, so no replica's clock reaches the
    /// server. (A clock reading would be about 1.7e15 microseconds: far above anything here.)
    #[test]
    fn a_call_carries_no_clock_reading() {
        let keys = ("t".to_owned(), "p".to_owned());
        let call = GcraCall::new(
            keys,
            quota(10.0, 5),
            Duration::from_secs(60),
            Duration::from_millis(1500),
        );
        assert_eq!(call.args, [100_000, 400_000, 60_000_000, 1_500_000]);
    }

    #[test]
    fn intervals_round_up_and_everything_is_capped() {
        let keys = || ("t".to_owned(), "p".to_owned());
        // 3 per second: 333 333 333 ns rounds up to 333 334 us (never a faster rate).
        let call = GcraCall::new(keys(), quota(3.0, 2), Duration::ZERO, Duration::ZERO);
        assert_eq!(call.args, [333_334, 333_334, 0, 0]);
        // 1e9 per second: 1 ns rounds up to 1 us.
        let call = GcraCall::new(keys(), quota(1e9, 1), Duration::ZERO, Duration::ZERO);
        assert_eq!(call.interval_us(), 1);
        let huge = Quota::new(
            Rate::every(courier_ratelimit::MAX_INTERVAL).unwrap(),
            NonZeroU32::MAX,
        );
        let call = GcraCall::new(keys(), huge, Duration::MAX, Duration::MAX);
        assert_eq!(call.args[1..], [CAP_US, CAP_US, CAP_US]);
    }

    /// Skew: the reply's wait is laid on the caller's clock from the moment the reply arrived,
    /// whatever time the server keeps.
    #[tokio::test(start_paused = true)]
    async fn replies_become_decisions_on_the_local_clock() {
        let now = Instant::now();
        let admit = Reply::from_values(&[1, 250_000, 0, 1_700_000_000_000_000]).unwrap();
        let Decision::Admit(grant) = admit.into_decision(now) else {
            panic!("admitted")
        };
        assert_eq!(grant.at(), now + Duration::from_millis(250));
        assert_eq!(grant.ticket(), 1_700_000_000_000_000 | REDIS_TICKET);

        let deny = Reply::from_values(&[0, 2_000_000, 1, 0]).unwrap();
        assert_eq!(
            deny.into_decision(now),
            Decision::Deny(Denial::new(Duration::from_secs(2)).parked(true))
        );

        let odd = Reply::from_values(&[1, -5, 0, -1]).unwrap();
        assert_eq!(odd.wait_us, 0);
        assert_eq!(odd.ticket, 0);
    }

    #[test]
    fn malformed_replies_are_errors() {
        assert!(Reply::from_values(&[1, 2, 3]).is_err());
        assert!(Reply::from_values(&[2, 0, 0, 0]).is_err());
        assert!(Reply::from_values(&[1, 0, 7, 0]).is_err());
        assert!(Reply::from_values(&[]).is_err());
    }
}
