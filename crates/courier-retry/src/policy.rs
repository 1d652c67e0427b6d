//! How long to wait between attempts when the server does not say.
//!
//! Full jitter: the wait before retry `n` (1 for the first retry) is drawn uniformly from
//! `[0, min(cap, base * 2^(n-1))]`. Clients that failed together then come back spread over the
//! whole window instead of in waves.

use rand::{Rng, RngExt};
use std::time::Duration;

/// Whether backoff waits are randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// Uniform in `[0, ceiling]`: breaks retry waves.
    #[default]
    Full,
    /// Exactly the ceiling: plain exponential backoff, for comparison and special cases.
    None,
}

/// The longest backoff before retry `retry` (1 for the first retry): `min(cap, base * 2^(retry-1))`.
/// Never overflows.
///
/// ```
/// use courier_retry::policy::backoff_ceiling;
/// use std::time::Duration;
///
/// let (base, cap) = (Duration::from_millis(500), Duration::from_secs(30));
/// assert_eq!(backoff_ceiling(base, cap, 1), Duration::from_millis(500));
/// assert_eq!(backoff_ceiling(base, cap, 3), Duration::from_secs(2));
/// assert_eq!(backoff_ceiling(base, cap, 100), cap);
/// ```
pub fn backoff_ceiling(base: Duration, cap: Duration, retry: u32) -> Duration {
    let exp = retry.saturating_sub(1);
    let base = base.as_nanos();
    let nanos = if base == 0 {
        0
    } else if exp >= base.leading_zeros() {
        u128::MAX
    } else {
        base << exp
    };
    if nanos >= cap.as_nanos() {
        cap
    } else {
        // Below `cap`, so it fits a Duration.
        Duration::new(
            (nanos / 1_000_000_000) as u64,
            (nanos % 1_000_000_000) as u32,
        )
    }
}

/// The backoff before retry `retry`: uniform in `[0, backoff_ceiling(..)]` for
/// [`Jitter::Full`], the ceiling itself for [`Jitter::None`].
pub fn backoff<R: Rng + ?Sized>(
    base: Duration,
    cap: Duration,
    retry: u32,
    jitter: Jitter,
    rng: &mut R,
) -> Duration {
    let ceiling = backoff_ceiling(base, cap, retry);
    match jitter {
        Jitter::None => ceiling,
        Jitter::Full => {
            let top = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(rng.random_range(0..=top))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    proptest! {
        #[test]
        fn full_jitter_stays_in_bounds(
            base_ms in 0u64..10_000,
            cap_ms in 0u64..100_000,
            retry in 0u32..200,
            seed in any::<u64>(),
        ) {
            let (base, cap) = (Duration::from_millis(base_ms), Duration::from_millis(cap_ms));
            let mut rng = SmallRng::seed_from_u64(seed);
            let wait = backoff(base, cap, retry, Jitter::Full, &mut rng);
            let expected = {
                let exp = retry.saturating_sub(1);
                let f = 2f64.powi(exp.min(1000) as i32);
                (base.as_secs_f64() * f).min(cap.as_secs_f64())
            };
            prop_assert!(wait.as_secs_f64() <= expected + 1e-9, "{wait:?} > {expected}");
            prop_assert!(wait <= cap);
            prop_assert_eq!(backoff(base, cap, retry, Jitter::None, &mut rng), backoff_ceiling(base, cap, retry));
        }
    }

    #[test]
    fn huge_values_saturate_at_the_cap() {
        let cap = Duration::from_secs(30);
        assert_eq!(backoff_ceiling(Duration::MAX, cap, 1), cap);
        assert_eq!(backoff_ceiling(Duration::from_nanos(1), cap, u32::MAX), cap);
        assert_eq!(
            backoff_ceiling(Duration::ZERO, cap, u32::MAX),
            Duration::ZERO
        );
    }
}
