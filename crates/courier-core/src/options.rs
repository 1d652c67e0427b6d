//! Options for one call: its own deadline, attempts, retry-safety and cache use.
//!
//! A [`CallOptions`] overrides, for the one request it is put on, what the layers were built
//! with. It travels in the request's [`CallContext`] ([`CallOptions::apply`]), which the
//! layers hold already: reading it costs them a field read. Each option is read by one layer;
//! a stack without that layer ignores it.
//!
//! | Option | Read by | Effect on this call |
//! |---|---|---|
//! | [`deadline`](CallOptions::deadline) | `courier_deadline::DeadlineLayer` | replaces the layer's budget, shorter or longer; a deadline already in force (an outer layer's, a server-side scope's) still bounds it: a deadline only shrinks |
//! | [`attempts`](CallOptions::attempts) | `courier_retry::RetryLayer` | replaces the layer's attempts; the retry budget still has the last word |
//! | [`retry_safe`](CallOptions::retry_safe) | `courier_retry::RetryLayer` | `true`: repeated as an idempotent request would be; `false`: never repeated once it may have reached the server, whatever its method, key or path |
//! | [`hedge_after`](CallOptions::hedge_after) | `courier_retry::hedge::HedgeLayer` | sends a hedge after this delay, in place of the layer's delay (fixed or learned); the request must still be retry-safe, and the hedge budget still has the last word |
//! | [`no_hedge`](CallOptions::no_hedge) | `courier_retry::hedge::HedgeLayer` | no hedge for this call |
//! | [`no_cache`](CallOptions::no_cache) | `courier_cache::EtagCacheLayer` | the cache neither answers it nor stores its answer, adds no validators and joins no other call's request; the response is marked [`CacheStatus::Bypass`](crate::CacheStatus::Bypass) |
//!
//! A connect failure is retried even under `retry_safe(false)`: nothing was sent, so repeating
//! the request cannot repeat its effect. An unsafe method (a POST, say) sent with `no_cache`
//! still removes the stored entries of its URI when it succeeds: the call changed the resource
//! whether or not it used the cache.
//!
//! # Validation
//!
//! The options that can be wrong are refused when set, with an [`InvalidConfig`] that names
//! the option and the value given, as the layers' setters are:
//!
//! - a deadline must be above zero and at most [`CallOptions::MAX_DEADLINE`] (one day): a
//!   call that may not take any time is no call, and a longer one is more likely a unit
//!   mistake (seconds given as milliseconds) than a wish;
//! - attempts must be at least 1 (the first attempt counts); there is no upper bound, as there
//!   is none on `RetryLayer::attempts`;
//! - a hedge delay must be above zero and at most [`CallOptions::MAX_HEDGE_DELAY`] (one hour):
//!   a hedge sent at once is a second request, not a hedge.
//!
//! ```
//! use courier_core::{CallContext, CallOptions};
//! use std::time::Duration;
//!
//! let options = CallOptions::new()
//!     .deadline(Duration::from_millis(200))?
//!     .attempts(1)?
//!     .no_cache();
//! let mut req = http::Request::get("http://api.example/items").body(()).unwrap();
//! options.apply(&mut req);
//! let ctx = CallContext::get(req.extensions()).unwrap();
//! assert_eq!(ctx.options().budget(), Some(Duration::from_millis(200)));
//! assert_eq!(ctx.options().max_attempts(), Some(1));
//! assert!(ctx.options().bypasses_cache());
//!
//! let err = CallOptions::new().attempts(0).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "invalid setting: CallOptions::attempts must be at least 1, got 0; use 1 for a single attempt"
//! );
//! # Ok::<_, courier_core::InvalidConfig>(())
//! ```

use crate::error::InvalidConfig;
use crate::extensions::CallContext;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

/// What one call asks of the layers in place of their own settings; see the
/// [module docs](self) for which layer reads which option.
///
/// Every option is unset by default: the layers' settings apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// In nanoseconds (a day fits): the options stay three words in every call's context.
    deadline: Option<NonZeroU64>,
    attempts: Option<NonZeroU32>,
    retry_safe: Option<bool>,
    no_cache: bool,
    hedge: Hedge,
}

/// What a call asks of the hedge layer: kept in microseconds, so the options stay small.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Hedge {
    #[default]
    Unset,
    Off,
    After(NonZeroU32),
}

/// What a call asked of the hedge layer with [`CallOptions::hedge_after`] or
/// [`CallOptions::no_hedge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hedging {
    /// No hedge for this call.
    Off,
    /// A hedge after this delay, in place of the layer's.
    After(Duration),
}

impl CallOptions {
    /// The longest deadline a call may ask for: one day.
    pub const MAX_DEADLINE: Duration = Duration::from_secs(86_400);

    /// The longest hedge delay a call may ask for: one hour.
    pub const MAX_HEDGE_DELAY: Duration = Duration::from_secs(3_600);

    /// No option set: the layers' own settings apply.
    pub const fn new() -> Self {
        Self {
            deadline: None,
            attempts: None,
            retry_safe: None,
            no_cache: false,
            hedge: Hedge::Unset,
        }
    }

    /// The call's total budget, from the moment the deadline layer sees it, in place of that
    /// layer's own.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] for zero or for more than [`MAX_DEADLINE`](Self::MAX_DEADLINE).
    pub fn deadline(mut self, budget: Duration) -> Result<Self, InvalidConfig> {
        if budget.is_zero() {
            return Err(InvalidConfig::new(
                "CallOptions::deadline must be above zero",
                format_args!("{budget:?}"),
                "the time this call may take, such as 2s",
            ));
        }
        if budget > Self::MAX_DEADLINE {
            return Err(InvalidConfig::new(
                "CallOptions::deadline must be at most one day",
                format_args!("{budget:?}"),
                "a day or less",
            ));
        }
        // Above zero and at most a day: in range.
        self.deadline = u64::try_from(budget.as_nanos())
            .ok()
            .and_then(NonZeroU64::new);
        Ok(self)
    }

    /// How many attempts the call may make in all, the first included, in place of the retry
    /// layer's own.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] for 0.
    pub fn attempts(mut self, attempts: u32) -> Result<Self, InvalidConfig> {
        let Some(attempts) = NonZeroU32::new(attempts) else {
            return Err(InvalidConfig::new(
                "CallOptions::attempts must be at least 1",
                attempts,
                "1 for a single attempt",
            ));
        };
        self.attempts = Some(attempts);
        Ok(self)
    }

    /// Whether the call may be repeated after it may have reached the server, in place of
    /// what its method, `Idempotency-Key`, path and
    /// [`RetrySafe`](crate::idempotency::RetrySafe) extension say
    /// ([`Classifier::is_retry_safe`](crate::Classifier::is_retry_safe)).
    pub const fn retry_safe(mut self, safe: bool) -> Self {
        self.retry_safe = Some(safe);
        self
    }

    /// The cache neither answers the call nor stores its answer.
    pub const fn no_cache(mut self) -> Self {
        self.no_cache = true;
        self
    }

    /// Sends a hedge of this call after `delay` (in place of the hedge layer's own delay), if
    /// the call is retry-safe and the hedge budget allows it. Microseconds count; less is
    /// rounded up to one.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] for zero or for more than [`MAX_HEDGE_DELAY`](Self::MAX_HEDGE_DELAY).
    pub fn hedge_after(mut self, delay: Duration) -> Result<Self, InvalidConfig> {
        if delay.is_zero() || delay > Self::MAX_HEDGE_DELAY {
            return Err(InvalidConfig::new(
                "CallOptions::hedge_after must be above zero and at most one hour",
                format_args!("{delay:?}"),
                "the time after which a second request may go, such as 50ms",
            ));
        }
        // At most an hour: fits in u32 microseconds.
        let micros = u32::try_from(delay.as_micros()).unwrap_or(u32::MAX).max(1);
        self.hedge = Hedge::After(NonZeroU32::new(micros).expect("at least 1"));
        Ok(self)
    }

    /// No hedge for this call, whatever the hedge layer's settings.
    pub const fn no_hedge(mut self) -> Self {
        self.hedge = Hedge::Off;
        self
    }

    /// What [`hedge_after`](Self::hedge_after) or [`no_hedge`](Self::no_hedge) said, if either
    /// was called.
    pub const fn hedging(&self) -> Option<Hedging> {
        match self.hedge {
            Hedge::Unset => None,
            Hedge::Off => Some(Hedging::Off),
            Hedge::After(micros) => {
                Some(Hedging::After(Duration::from_micros(micros.get() as u64)))
            }
        }
    }

    /// The budget set with [`deadline`](Self::deadline).
    pub const fn budget(&self) -> Option<Duration> {
        match self.deadline {
            Some(nanos) => Some(Duration::from_nanos(nanos.get())),
            None => None,
        }
    }

    /// The attempts set with [`attempts`](Self::attempts).
    pub const fn max_attempts(&self) -> Option<u32> {
        match self.attempts {
            Some(attempts) => Some(attempts.get()),
            None => None,
        }
    }

    /// What [`retry_safe`](Self::retry_safe) said, if it was called.
    pub const fn retry_safety(&self) -> Option<bool> {
        self.retry_safe
    }

    /// Whether [`no_cache`](Self::no_cache) was called.
    pub const fn bypasses_cache(&self) -> bool {
        self.no_cache
    }

    /// Whether no option is set.
    pub const fn is_empty(&self) -> bool {
        self.deadline.is_none()
            && self.attempts.is_none()
            && self.retry_safe.is_none()
            && !self.no_cache
            && matches!(self.hedge, Hedge::Unset)
    }

    /// Puts these options in `req`'s [`CallContext`], replacing any set before.
    pub fn apply<B>(self, req: &mut http::Request<B>) {
        CallContext::get_or_insert(req).set_options(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_invalid_value_is_refused_with_the_option_and_the_value() {
        for (err, text) in [
            (
                CallOptions::new().attempts(0).unwrap_err(),
                "invalid setting: CallOptions::attempts must be at least 1, got 0; \
                 use 1 for a single attempt",
            ),
            (
                CallOptions::new().deadline(Duration::ZERO).unwrap_err(),
                "invalid setting: CallOptions::deadline must be above zero, got 0ns; \
                 use the time this call may take, such as 2s",
            ),
            (
                CallOptions::new().hedge_after(Duration::ZERO).unwrap_err(),
                "invalid setting: CallOptions::hedge_after must be above zero and at most one \
                 hour, got 0ns; use the time after which a second request may go, such as 50ms",
            ),
            (
                CallOptions::new()
                    .deadline(Duration::from_secs(86_401))
                    .unwrap_err(),
                "invalid setting: CallOptions::deadline must be at most one day, got 86401s; \
                 use a day or less",
            ),
        ] {
            assert_eq!(err.to_string(), text);
        }
    }

    #[test]
    fn the_bounds_themselves_are_accepted() {
        let options = CallOptions::new()
            .attempts(1)
            .and_then(|o| o.deadline(CallOptions::MAX_DEADLINE))
            .and_then(|o| o.attempts(u32::MAX))
            .unwrap();
        assert_eq!(options.max_attempts(), Some(u32::MAX), "the last call wins");
        assert_eq!(options.budget(), Some(CallOptions::MAX_DEADLINE));
        let shortest = CallOptions::new()
            .deadline(Duration::from_nanos(1))
            .unwrap();
        assert_eq!(shortest.budget(), Some(Duration::from_nanos(1)));
        let hedge = CallOptions::new()
            .hedge_after(CallOptions::MAX_HEDGE_DELAY)
            .unwrap();
        assert_eq!(
            hedge.hedging(),
            Some(Hedging::After(CallOptions::MAX_HEDGE_DELAY))
        );
        let hedge = CallOptions::new()
            .hedge_after(Duration::from_nanos(1))
            .unwrap();
        assert_eq!(
            hedge.hedging(),
            Some(Hedging::After(Duration::from_micros(1))),
            "rounded up to a microsecond"
        );
        assert!(!hedge.is_empty());
        assert_eq!(
            hedge.no_hedge().hedging(),
            Some(Hedging::Off),
            "the last call wins"
        );
        assert!(CallOptions::new().hedging().is_none());
        CallOptions::new()
            .hedge_after(CallOptions::MAX_HEDGE_DELAY + Duration::from_nanos(1))
            .unwrap_err();
    }

    #[test]
    fn options_are_three_words() {
        assert_eq!(std::mem::size_of::<CallOptions>(), 24);
    }

    #[test]
    fn options_start_unset_and_say_what_was_set() {
        let none = CallOptions::new();
        assert_eq!(none, CallOptions::default());
        assert!(none.is_empty());
        assert_eq!(
            (none.budget(), none.max_attempts(), none.retry_safety()),
            (None, None, None)
        );
        assert!(!none.bypasses_cache());
        for set in [
            none.retry_safe(false),
            none.retry_safe(true),
            none.no_cache(),
            none.attempts(2).unwrap(),
            none.deadline(Duration::from_secs(1)).unwrap(),
        ] {
            assert!(!set.is_empty(), "{set:?}");
        }
        assert_eq!(none.retry_safe(false).retry_safety(), Some(false));
        assert_eq!(none.retry_safe(true).retry_safety(), Some(true));
    }

    #[test]
    fn applied_options_are_in_the_context_beside_its_deadline() {
        let mut req = http::Request::get("http://api.example/x").body(()).unwrap();
        let options = CallOptions::new().no_cache().retry_safe(true);
        options.apply(&mut req);
        assert_eq!(
            CallContext::get(req.extensions()).map(CallContext::options),
            Some(&options)
        );
        // Applied again: replaced, not merged.
        let other = CallOptions::new().attempts(4).unwrap();
        other.apply(&mut req);
        assert_eq!(
            CallContext::get(req.extensions()).map(|c| *c.options()),
            Some(other)
        );
        assert_eq!(req.extensions().len(), 1, "one extension: the context");
    }
}
