//! What an attempt's outcome means to the breaker, and where the attempt stands in its call.

use crate::config::Config;
use courier_core::Attempts;
use courier_core::classify::FailureKind;
use courier_core::extensions::AttemptOutcome;

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
    /// An answer with a failure status: the host is up, this call failed.
    FailingAnswer,
    /// Cancelled, or refused by our own layers below: says nothing about the host.
    Neither,
}

impl Outcome {
    /// What a failure of `kind` means: our own refusals and a failed certificate check say
    /// nothing about the host (a certificate no wait mends: opening the circuit would only
    /// hide the TLS error behind `CircuitOpen`).
    pub(crate) const fn of_failure(kind: FailureKind) -> Self {
        match kind {
            FailureKind::Local | FailureKind::Tls => Self::Neither,
            FailureKind::Connect => Self::Unreachable,
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
        if ext.is_empty() {
            return Self::FIRST;
        }
        match ext.get::<Attempts>() {
            Some(records) if records.count() > 0 => Self::of_retry(records, config),
            _ => Self::FIRST,
        }
    }

    #[cold]
    fn of_retry(records: &Attempts, config: &Config) -> Self {
        let mut bits = Self::RETRY;
        for record in records {
            bits |= match config.judge(record.outcome) {
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

impl Config {
    /// What an attempt that ended with `outcome` meant to this breaker (the slow-call
    /// threshold aside, which no record shows).
    pub(crate) fn judge(&self, outcome: AttemptOutcome) -> Outcome {
        match outcome {
            AttemptOutcome::Status(s) if self.failure_statuses.contains(s) => {
                Outcome::FailingAnswer
            }
            AttemptOutcome::Grpc(code) if self.grpc_failure_codes.contains(&code) => {
                Outcome::FailingAnswer
            }
            AttemptOutcome::Failure(kind) => Outcome::of_failure(kind),
            _ => Outcome::Success,
        }
    }
}
