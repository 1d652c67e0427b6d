//! Plans: what `/s/{name}` answers, one step at a time.

use courier_core::excerpt::Excerpt;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use http::{HeaderName, HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};

/// The longest wait a step may ask for, before its headers (`delay_ms`) or between two body
/// bytes (`drip_ms`): an hour. A longer one would never answer within any test.
pub const MAX_STEP_WAIT: Duration = Duration::from_secs(3600);

/// One step of a plan: how to answer the next request(s) to `/s/{name}`.
///
/// In JSON every field is optional and unknown fields are refused:
///
/// ```json
/// {"status": 503, "headers": {"retry-after": "2"}, "body": "busy", "delay_ms": 0,
///  "drip_ms": 0, "reset": false, "times": 2}
/// ```
///
/// In Rust, build one with the constructors and consuming setters:
///
/// ```
/// use courier_faultserver::Step;
///
/// let step = Step::status(503).header("retry-after", "2").times(2);
/// assert_eq!((step.status, step.times), (503, 2));
/// assert_eq!(Step::default().status, 200);
/// assert!(Step::reset().reset);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Step {
    /// The status code, 200-999. Defaults to 200.
    pub status: u16,
    /// Response headers, sent as given; they replace the server's defaults (`Date` included).
    /// A `content-length` larger than the body cuts the body short: the server sends the body
    /// and then ends the response early (HTTP/1.1 closes the connection; HTTP/2 ends the stream
    /// short of the length). A `content-length` smaller than the body is refused. Defaults to
    /// none.
    pub headers: BTreeMap<String, String>,
    /// The response body. Defaults to empty.
    pub body: String,
    /// How long to wait before sending the headers (or before the reset), at most
    /// [`MAX_STEP_WAIT`]. Defaults to 0.
    pub delay_ms: u64,
    /// The gap between body bytes, at most [`MAX_STEP_WAIT`]: the body is sent one byte at a
    /// time. Defaults to 0 (all at once).
    pub drip_ms: u64,
    /// Close the connection without sending a single response byte. Defaults to false.
    pub reset: bool,
    /// How many requests this step answers before the next one takes over. Defaults to 1.
    pub times: u32,
}

impl Default for Step {
    fn default() -> Self {
        Self {
            status: 200,
            headers: BTreeMap::new(),
            body: String::new(),
            delay_ms: 0,
            drip_ms: 0,
            reset: false,
            times: 1,
        }
    }
}

// === impl Step ===

impl Step {
    /// A step answering 200 with an empty body.
    pub fn ok() -> Self {
        Self::default()
    }

    /// A step answering `status`.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            ..Self::default()
        }
    }

    /// A step closing the connection without an answer.
    pub fn reset() -> Self {
        Self {
            reset: true,
            ..Self::default()
        }
    }

    /// Adds (or replaces) a response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }

    /// Waits `delay` before the headers (or before the reset); kept in whole milliseconds. A
    /// plan with a delay over [`MAX_STEP_WAIT`] is refused.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Sends the body one byte at a time, `gap` apart; kept in whole milliseconds. A plan with a
    /// gap over [`MAX_STEP_WAIT`] is refused.
    pub fn drip(mut self, gap: Duration) -> Self {
        self.drip_ms = u64::try_from(gap.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Repeats the step for `times` requests.
    pub fn times(mut self, times: u32) -> Self {
        self.times = times;
        self
    }

    /// Checks the step and turns it into what the server sends.
    pub(crate) fn validate(&self, index: usize) -> Result<ValidStep, PlanError> {
        let bad = |message: String| PlanError::new(format!("step {index}: {message}"));
        let status = match StatusCode::from_u16(self.status) {
            Ok(status) if status.is_informational() => {
                return Err(bad(format!(
                    "status {} is informational and cannot end a response; use 200-999",
                    self.status
                )));
            }
            Ok(status) => status,
            Err(_) => {
                return Err(bad(format!(
                    "status {} is out of range; use 200-999",
                    self.status
                )));
            }
        };
        if self.times == 0 {
            return Err(bad("times must be at least 1".to_owned()));
        }
        for (field, ms) in [("delay_ms", self.delay_ms), ("drip_ms", self.drip_ms)] {
            let max = MAX_STEP_WAIT.as_millis();
            if u128::from(ms) > max {
                return Err(bad(format!(
                    "{field} {ms} is longer than an hour; use at most {max}"
                )));
            }
        }
        let mut headers = Vec::with_capacity(self.headers.len());
        for (name, value) in &self.headers {
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                bad(format!(
                    "header name \"{}\" is not a valid header name",
                    Excerpt::new(name)
                ))
            })?;
            let header_value = HeaderValue::from_str(value).map_err(|_| {
                bad(format!(
                    "header \"{}\" has value \"{}\", which is not a valid header value",
                    Excerpt::new(name),
                    Excerpt::new(value)
                ))
            })?;
            headers.push((header_name, header_value));
        }
        // Headers are inserted in order when sent, so the last `content-length` is the one
        // that goes out. One that is not a plain number goes out as given, with the whole body.
        let announced = headers
            .iter()
            .rev()
            .find(|(name, _)| name == header::CONTENT_LENGTH)
            .and_then(|(_, value)| decimal(value.as_bytes()));
        let body_len = self.body.len() as u64;
        let cut_short = match announced {
            Some(announced) if announced < body_len => {
                return Err(bad(format!(
                    "content-length {announced} is less than the body's {body_len} bytes; \
                     announce at least the body's length (more cuts the body short)"
                )));
            }
            Some(announced) => announced > body_len,
            None => false,
        };
        Ok(ValidStep {
            status,
            headers,
            body: bytes::Bytes::from(self.body.clone()),
            delay: Duration::from_millis(self.delay_ms),
            drip: Duration::from_millis(self.drip_ms),
            reset: self.reset,
            cut_short,
        })
    }
}

/// The body of `POST /__plan/{name}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanBody {
    pub(crate) plan: Vec<Step>,
}

/// A step that passed validation, ready to send.
#[derive(Clone, Debug)]
pub(crate) struct ValidStep {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: bytes::Bytes,
    pub(crate) delay: Duration,
    pub(crate) drip: Duration,
    pub(crate) reset: bool,
    /// The step announces a longer `content-length` than its body.
    pub(crate) cut_short: bool,
}

impl ValidStep {
    /// What an exhausted plan answers.
    pub(crate) fn used_up() -> Self {
        Self {
            status: StatusCode::OK,
            headers: Vec::new(),
            body: bytes::Bytes::new(),
            delay: Duration::ZERO,
            drip: Duration::ZERO,
            reset: false,
            cut_short: false,
        }
    }
}

/// A `content-length` value as hyper reads the one it sends: ASCII digits only.
fn decimal(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, b| {
        let digit = char::from(*b).to_digit(10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// A plan in the order it is played, each step with the requests it has left.
#[derive(Clone, Debug, Default)]
pub(crate) struct Plan {
    steps: VecDeque<(ValidStep, u32)>,
}

// === impl Plan ===

impl Plan {
    /// Validates every step; the first bad one names itself in the error.
    pub(crate) fn new(steps: &[Step]) -> Result<Self, PlanError> {
        let steps = steps
            .iter()
            .enumerate()
            .map(|(i, step)| step.validate(i).map(|valid| (valid, step.times)))
            .collect::<Result<_, _>>()?;
        Ok(Self { steps })
    }

    /// Takes the step for the next request, or `None` when the plan is used up.
    pub(crate) fn next_step(&mut self) -> Option<ValidStep> {
        let (step, left) = self.steps.front_mut()?;
        *left -= 1;
        if *left == 0 {
            self.steps.pop_front().map(|(step, _)| step)
        } else {
            Some(step.clone())
        }
    }

    /// How many requests the plan still answers.
    pub(crate) fn remaining(&self) -> u64 {
        self.steps.iter().map(|(_, left)| u64::from(*left)).sum()
    }
}

/// Reads a plan as `POST /__plan/{name}` does: the JSON `{"plan": [step, ...]}`, with every step
/// checked as the server checks it.
///
/// ```
/// use courier_faultserver::{Step, parse_plan};
///
/// let plan = parse_plan(br#"{"plan": [{"status": 503, "times": 2}, {}]}"#).unwrap();
/// assert_eq!(plan, [Step::status(503).times(2), Step::ok()]);
/// let err = parse_plan(br#"{"plan": [{}, {"delay_ms": 4000000}]}"#).unwrap_err();
/// assert!(err.message().starts_with("step 1: delay_ms 4000000 is longer than an hour"));
/// ```
///
/// # Errors
///
/// When the JSON is not a plan, or a step is invalid; the error says which step and why.
pub fn parse_plan(json: &[u8]) -> Result<Vec<Step>, PlanError> {
    let steps = steps_of(json)?;
    for (index, step) in steps.iter().enumerate() {
        step.validate(index)?;
    }
    Ok(steps)
}

/// Reads the body of `POST /__plan/{name}` into the plan the server plays.
pub(crate) fn read_plan(body: &[u8]) -> Result<Plan, PlanError> {
    Plan::new(&steps_of(body)?)
}

fn steps_of(json: &[u8]) -> Result<Vec<Step>, PlanError> {
    let parsed: PlanBody = serde_json::from_slice(json).map_err(|e| {
        PlanError::new(format!(
            "the plan is not valid: {e}; send {{\"plan\": [{{\"status\": 503}}, ...]}}"
        ))
    })?;
    Ok(parsed.plan)
}

/// A plan the server refused, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    message: String,
}

impl PlanError {
    fn new(message: String) -> Self {
        Self { message }
    }

    /// What is wrong with the plan.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PlanError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_defaults() {
        let plan = read_plan(br#"{"plan": [{}]}"#).unwrap();
        assert_eq!(plan.remaining(), 1);
        let step: Step = serde_json::from_str("{}").unwrap();
        assert_eq!(step, Step::default());
    }

    #[test]
    fn steps_repeat_then_run_out() {
        let mut plan = Plan::new(&[Step::status(503).times(2), Step::status(500)]).unwrap();
        assert_eq!(plan.remaining(), 3);
        let statuses: Vec<_> = std::iter::from_fn(|| plan.next_step())
            .map(|s| s.status.as_u16())
            .collect();
        assert_eq!(statuses, [503, 503, 500]);
        assert!(plan.next_step().is_none());
    }

    #[test]
    fn waits_up_to_an_hour_are_taken() {
        let hour = MAX_STEP_WAIT;
        let step = Step::ok().delay(hour).drip(hour).body("ab");
        let valid = step.validate(0).unwrap();
        assert_eq!((valid.delay, valid.drip), (hour, hour));
        let too_long = hour + Duration::from_millis(1);
        assert!(Step::ok().delay(too_long).validate(0).is_err());
        assert!(Step::ok().drip(Duration::MAX).validate(0).is_err());
    }

    #[test]
    fn content_length_against_the_body() {
        let cut = |length: &str, body: &str| {
            Step::ok()
                .header("content-length", length)
                .body(body)
                .validate(0)
                .map(|v| v.cut_short)
        };
        assert_eq!(cut("2", "ab"), Ok(false));
        assert_eq!(cut("3", "ab"), Ok(true));
        assert_eq!(cut("100", ""), Ok(true));
        assert_eq!(cut("18446744073709551615", "ab"), Ok(true));
        // Not a plain number: sent as given, with the whole body.
        for length in ["x", "-1", "+3", "2, 2", " 3", "18446744073709551616", ""] {
            assert_eq!(cut(length, "ab"), Ok(false), "{length:?}");
        }
        assert!(cut("1", "ab").is_err());
        assert!(!Step::ok().body("ab").validate(0).unwrap().cut_short);
    }

    #[test]
    fn bad_plans_say_what_is_wrong() {
        let cases: &[(&[u8], &str)] = &[
            (b"{", "not valid"),
            (br#"{"plan": [{"stauts": 503}]}"#, "unknown field `stauts`"),
            (br#"{"plan": [], "extra": 1}"#, "unknown field `extra`"),
            (
                br#"{"plan": [{"status": 1000}]}"#,
                "status 1000 is out of range",
            ),
            (
                br#"{"plan": [{"status": 99}]}"#,
                "status 99 is out of range",
            ),
            (br#"{"plan": [{"status": 70000}]}"#, "not valid"),
            (br#"{"plan": [{"status": 101}]}"#, "informational"),
            (
                br#"{"plan": [{}, {"times": 0}]}"#,
                "step 1: times must be at least 1",
            ),
            (
                br#"{"plan": [{"headers": {"bad name": "x"}}]}"#,
                "header name",
            ),
            (
                br#"{"plan": [{"headers": {"x": "a\nb"}}]}"#,
                "not a valid header value",
            ),
            (br#"{"plan": [{"delay_ms": -1}]}"#, "not valid"),
            (
                br#"{"plan": [{"delay_ms": 1000000000000000}]}"#,
                "step 0: delay_ms 1000000000000000 is longer than an hour; use at most 3600000",
            ),
            (
                br#"{"plan": [{}, {"drip_ms": 18446744073709551615}]}"#,
                "step 1: drip_ms 18446744073709551615 is longer than an hour",
            ),
            (br#"{"plan": [{"delay_ms": 3600001}]}"#, "longer than an hour"),
            (
                br#"{"plan": [{"headers": {"content-length": "1"}, "body": "ab"}]}"#,
                "content-length 1 is less than the body's 2 bytes",
            ),
            (
                br#"{"plan": [{"headers": {"Content-Length": "9", "content-length": "0"}, "body": "a"}]}"#,
                "content-length 0 is less",
            ),
            (br#"{"steps": []}"#, "unknown field `steps`"),
        ];
        for (body, expected) in cases {
            let err = read_plan(body).unwrap_err();
            assert_eq!(parse_plan(body).unwrap_err(), err);
            assert!(
                err.message().contains(expected),
                "{:?}: {err} does not mention {expected:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
