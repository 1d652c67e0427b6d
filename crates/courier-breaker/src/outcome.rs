//! What an attempt's outcome means to the breaker, and where the attempt stands in its call.

use crate::config::Config;
use courier_core::extensions::AttemptOutcome;
use courier_core::{Attempts, CallContext, FailureKind, Verdict};

/// What a call's outcome means to the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success,
    /// The host is not there: the connection was refused or never made, the name does not
    /// resolve, the network is out of reach ([`FailureKind::Connect`]). Nothing was sent.
    Unreachable,
    /// A failure after the request went out (a reset, a timeout, an answer cut short, a slow
    /// call): the host may well be up; this call failed.
    Failure,
    /// An answer whose verdict counts against the host: the host is up, this call failed.
    FailingAnswer,
    /// Cancelled, or refused by our own layers below: says nothing about the host.
    Neither,
}

impl Outcome {
    /// What an answer with `verdict` means: a failing answer when the verdict counts against
    /// the host, else a success (a 404 or a 429 is a healthy server answering on purpose).
    #[inline]
    pub(crate) const fn of_answer(verdict: Verdict) -> Self {
        if verdict.counts_against_host() {
            Self::FailingAnswer
        } else {
            Self::Success
        }
    }

    /// What a failure with no answer, judged `verdict`, means: one that does not count against
    /// the host (our own refusals, a failed certificate check: a certificate no wait mends,
    /// and an open circuit would only hide the TLS error behind `CircuitOpen`) is neither; a
    /// connect failure says the host is not there; any other is this call's failure.
    pub(crate) const fn of_failure(verdict: Verdict) -> Self {
        match verdict.failure_kind() {
            _ if !verdict.counts_against_host() => Self::Neither,
            Some(FailureKind::Connect) => Self::Unreachable,
            _ => Self::Failure,
        }
    }
}

// === impl Role ===

/// Where an attempt stands in its call, read from the retry layer's records on the request
/// (courier's retry puts the records of the attempts so far on every attempt after the
/// first): a call's failures count once, however many attempts it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Role(u8);

impl Role {
    /// A call's first attempt (or a request from no retry layer).
    pub(crate) const FIRST: Self = Self(0);
    /// A later attempt of a call.
    const RETRY: u8 = 1;
    /// An earlier attempt of the call failed, and was counted.
    const COUNTED: u8 = 2;
    /// An earlier attempt's failure is the call's failure in the failure-rate window.
    const IN_WINDOW: u8 = 4;

    /// The role of a request with `ext`. A request with no extensions costs one branch.
    #[inline]
    pub(crate) fn of(ext: &http::Extensions, config: &Config) -> Self {
        match CallContext::get(ext).and_then(CallContext::earlier_attempts) {
            Some(records) => Self::of_retry(records, config),
            None => Self::FIRST,
        }
    }

    #[cold]
    fn of_retry(records: &Attempts, config: &Config) -> Self {
        let mut bits = Self::RETRY;
        for record in records {
            // The verdict the call's classifier gave the attempt (the slow-call threshold
            // aside, which no record shows).
            let outcome = match record.outcome {
                AttemptOutcome::Failure(_) => Outcome::of_failure(record.verdict),
                AttemptOutcome::Status(_) | AttemptOutcome::Grpc(_) => {
                    Outcome::of_answer(record.verdict)
                }
            };
            bits |= match outcome {
                Outcome::FailingAnswer if config.answers_for_ms > 0 => Self::COUNTED,
                Outcome::FailingAnswer | Outcome::Unreachable | Outcome::Failure => {
                    Self::COUNTED | Self::IN_WINDOW
                }
                Outcome::Success | Outcome::Neither => 0,
            };
        }
        Self(bits)
    }

    pub(crate) const fn is_first(self) -> bool {
        self.0 & Self::RETRY == 0
    }

    pub(crate) const fn counted(self) -> bool {
        self.0 & Self::COUNTED != 0
    }

    pub(crate) const fn in_window(self) -> bool {
        self.0 & Self::IN_WINDOW != 0
    }

    /// The role in three bits, and back.
    pub(crate) const fn bits(self) -> u32 {
        self.0 as u32
    }

    pub(crate) const fn from_bits(bits: u32) -> Self {
        Self((bits & 7) as u8)
    }
}
