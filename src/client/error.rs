//! The client's own errors, each one a variant of [`crate::Error`].

use super::Response;
use crate::error::{Attempted, Error};
use courier_core::{Attempts, BoxError};
use http::StatusCode;
use std::fmt;

/// A request [`Client`](super::Client) could not build ([`Error::Builder`]): the first thing
/// that was wrong with it. Nothing was sent.
#[derive(Debug)]
pub struct BuilderError {
    what: &'static str,
    source: Option<BoxError>,
}

// === impl BuilderError ===

impl BuilderError {
    pub(crate) fn new(what: &'static str, source: impl Into<BoxError>) -> Self {
        Self {
            what,
            source: Some(source.into()),
        }
    }

    pub(crate) const fn bare(what: &'static str) -> Self {
        Self { what, source: None }
    }

    /// What was wrong, e.g. `"invalid URL"` or `"invalid header value"`.
    pub const fn what(&self) -> &'static str {
        self.what
    }
}

impl fmt::Display for BuilderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request not built: {}", self.what)?;
        if let Some(source) = &self.source {
            // Quoted: a URL or header value given by the caller, whole.
            let text = courier_core::excerpt::Excerpt::new(&source.to_string()).to_string();
            write!(f, ": {text}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BuilderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// An answer with a 4xx or 5xx status ([`Error::Status`]), from
/// [`Response::error_for_status`]: the whole response, whose body can still be read.
///
/// ```no_run
/// # async fn run(client: courier::Client) -> Result<(), courier::Error> {
/// match client.get("http://127.0.0.1:8080/items").send().await?.error_for_status() {
///     Ok(resp) => println!("{}", resp.text().await?),
///     Err(courier::Error::Status(err)) => {
///         let status = err.status();
///         let why = err.into_response().text().await?;
///         println!("{status}: {why}");
///     }
///     Err(other) => return Err(other),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct StatusError {
    response: Box<Response>,
}

// === impl StatusError ===

impl StatusError {
    pub(crate) fn new(response: Response) -> Self {
        Self {
            response: Box::new(response),
        }
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.response.status()
    }

    /// The response.
    pub fn response(&self) -> &Response {
        &self.response
    }

    /// The response, to read its body.
    pub fn into_response(self) -> Response {
        *self.response
    }

    /// The attempts of the call, every redirect hop's included.
    pub fn attempts(&self) -> &Attempts {
        self.response.attempts()
    }
}

impl fmt::Display for StatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self.response.url();
        write!(
            f,
            "{} answered {}",
            courier_core::excerpt::Excerpt::new(&format!(
                "{}{}",
                url.origin().ascii_serialization(),
                url.path()
            )),
            self.status()
        )
    }
}

impl std::error::Error for StatusError {}

/// A response body that is not the JSON asked for ([`Error::Decode`]).
#[derive(Debug)]
pub struct DecodeError {
    source: serde_json::Error,
    status: StatusCode,
    attempts: Attempts,
}

// === impl DecodeError ===

impl DecodeError {
    pub(crate) fn new(source: serde_json::Error, status: StatusCode, attempts: Attempts) -> Self {
        Self {
            source,
            status,
            attempts,
        }
    }

    /// The status of the response whose body it was.
    pub const fn status(&self) -> StatusCode {
        self.status
    }

    /// The attempts of the call.
    pub fn attempts(&self) -> &Attempts {
        &self.attempts
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the body of a {} answer is not the JSON asked for: {}",
            self.status.as_u16(),
            self.source
        )
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// `err` with the records of `earlier` (earlier redirect hops, or the response whose body
/// failed) before its own.
pub(crate) fn prepend_attempts(err: Error, earlier: &Attempts) -> Error {
    if earlier.count() == 0 {
        return err;
    }
    let merged = |own: &Attempts| earlier.iter().chain(own).cloned().collect::<Attempts>();
    fn again<T>(a: Attempted<T>, merged: impl Fn(&Attempts) -> Attempts) -> Attempted<T> {
        let attempts = merged(a.attempts());
        Attempted::new(a.into_inner(), attempts)
    }
    match err {
        Error::DeadlineExceeded(a) => Error::DeadlineExceeded(again(a, merged)),
        Error::AttemptTimedOut(a) => Error::AttemptTimedOut(again(a, merged)),
        Error::CircuitOpen(a) => Error::CircuitOpen(again(a, merged)),
        Error::RateLimited(a) => Error::RateLimited(again(a, merged)),
        Error::ConcurrencyLimited(a) => Error::ConcurrencyLimited(again(a, merged)),
        Error::Transport {
            kind,
            source,
            attempts,
        } => Error::Transport {
            kind,
            source,
            attempts: merged(&attempts),
        },
        // Made here with every record already, or about no call at all.
        other => other,
    }
}

/// The attempts of `err`, or `response`'s when it has none (a body that failed after the
/// answer came).
pub(crate) fn with_response_attempts(err: Error, response: &Attempts) -> Error {
    if err.attempts().count() == 0 {
        prepend_attempts(err, response)
    } else {
        err
    }
}
