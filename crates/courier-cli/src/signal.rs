//! The signals that stop a run: SIGINT (Ctrl-C) and SIGTERM, each reported with the exit status
//! a shell gives a command that signal ended (128 + its number: 130 and 143); and SIGHUP, which
//! asks `batch --config` to read its file again.

use std::io;

/// One stream of stop signals, installed once per run: the first signal asks the run to wind
/// down, a second to abandon what is in flight.
#[derive(Debug)]
pub(crate) struct Stops {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

/// Which signal came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGINT, Ctrl-C at a terminal.
    Interrupt,
    /// SIGTERM, as `kill` and service managers send it.
    Terminate,
}

// === impl Stop ===

impl Stop {
    /// The exit status after this signal: 130 for SIGINT, 143 for SIGTERM.
    pub(crate) fn exit_status(self) -> u8 {
        match self {
            Self::Interrupt => crate::INTERRUPTED,
            Self::Terminate => crate::TERMINATED,
        }
    }

    /// What happened to the run, for messages: `interrupted` or `terminated`.
    pub(crate) fn outcome(self) -> &'static str {
        match self {
            Self::Interrupt => "interrupted",
            Self::Terminate => "terminated",
        }
    }

    /// The signal's name, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "Ctrl-C",
            Self::Terminate => "SIGTERM",
        }
    }
}

// === impl Stops ===

impl Stops {
    /// Installs the handlers; an error leaves the default (the signal ends the process). Needs
    /// a tokio runtime with its signal driver.
    pub(crate) fn install() -> io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// The next stop signal.
    pub(crate) async fn next(&mut self) -> Stop {
        #[cfg(unix)]
        {
            tokio::select! {
                Some(()) = self.interrupt.recv() => Stop::Interrupt,
                Some(()) = self.terminate.recv() => Stop::Terminate,
                else => std::future::pending().await,
            }
        }
        #[cfg(not(unix))]
        {
            match tokio::signal::ctrl_c().await {
                Ok(()) => Stop::Interrupt,
                Err(_) => std::future::pending().await,
            }
        }
    }
}

/// The next stop signal of `stops`; never, when no handlers could be installed.
pub(crate) async fn next_stop(stops: &mut Option<Stops>) -> Stop {
    match stops {
        Some(stops) => stops.next().await,
        None => std::future::pending().await,
    }
}

/// SIGHUP, asking for the configuration to be read again; installed only by a run that can
/// (elsewhere SIGHUP keeps its default, ending the process).
#[derive(Debug)]
pub(crate) struct Hangups {
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
}

// === impl Hangups ===

impl Hangups {
    /// Installs the handler. Needs a tokio runtime with its signal driver.
    pub(crate) fn install() -> io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                hangup: signal(SignalKind::hangup())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// The next SIGHUP; never where there is no such signal.
    pub(crate) async fn next(&mut self) {
        #[cfg(unix)]
        if self.hangup.recv().await.is_some() {
            return;
        }
        std::future::pending().await
    }
}

/// The next SIGHUP of `hangups`; never, when no handler is installed.
pub(crate) async fn next_hangup(hangups: &mut Option<Hangups>) {
    match hangups {
        Some(hangups) => hangups.next().await,
        None => std::future::pending().await,
    }
}
