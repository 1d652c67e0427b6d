//! The breaker judges calls, not attempts: a retry (an attempt carrying the records of the
//! ones before it, as courier's retry layer sends it) counts with its call, and transport
//! faults are told apart: a host that is not there opens at the count (every attempt that
//! finds nothing listening counts), a failure after the request went out is weighed by the
//! rate.

use courier_breaker::{CircuitBreakerLayer, CircuitState, FailureRate};
use courier_core::HostKey;
use courier_core::extensions::{AttemptOutcome, Decision, Reason};
use courier_core::{
    AttemptRecord, Attempts, BoxError, Classifier, FailureKind, ResponseHead, Verdict,
};
use http::{Request, Response, StatusCode};
use std::collections::VecDeque;
use std::io;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{Layer, ServiceExt, service_fn};

#[derive(Debug, Clone, Copy)]
enum Step {
    Ok,
    Answer(u16),
    Refused,
    Reset,
}

type Script = Arc<Mutex<VecDeque<Step>>>;

async fn answer(script: Script) -> Result<Response<()>, BoxError> {
    let step = script.lock().unwrap().pop_front().unwrap_or(Step::Ok);
    respond(step)
}

fn respond(step: Step) -> Result<Response<()>, BoxError> {
    let status = match step {
        Step::Ok => 200,
        Step::Answer(s) => s,
        Step::Refused => return Err(io::Error::from(io::ErrorKind::ConnectionRefused).into()),
        Step::Reset => return Err(io::Error::from(io::ErrorKind::ConnectionReset).into()),
    };
    Ok(Response::builder().status(status).body(()).unwrap())
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn outcome(step: Step) -> AttemptOutcome {
    match step {
        Step::Ok => AttemptOutcome::Status(StatusCode::OK),
        Step::Answer(s) => AttemptOutcome::Status(StatusCode::from_u16(s).unwrap()),
        Step::Refused => AttemptOutcome::Failure(FailureKind::Connect),
        Step::Reset => AttemptOutcome::Failure(FailureKind::Read),
    }
}

/// Attempt `earlier.len() + 1` of a call whose earlier attempts ended as `earlier`, with the
/// verdicts `classifier` gave them.
fn attempt(earlier: &[Step], classifier: &Classifier) -> Request<()> {
    let mut req = Request::get("http://a.example/x").body(()).unwrap();
    if !earlier.is_empty() {
        let records: Attempts = earlier
            .iter()
            .enumerate()
            .map(|(i, step)| AttemptRecord {
                attempt: i as u32 + 1,
                outcome: outcome(*step),
                verdict: classifier.classify_result(&respond(*step)),
                decision: Decision::Retry,
                reason: Reason::RetryableFailure,
                wait: Duration::ZERO,
                wait_source: None,
                elapsed: Duration::ZERO,
            })
            .collect();
        courier_core::CallContext::get_or_insert(&mut req).set_earlier_attempts(records);
    }
    req
}

struct Run {
    layer: CircuitBreakerLayer,
    /// What retry, above the breaker, decided of each attempt.
    classifier: Classifier,
    script: Script,
}

impl Run {
    fn new(layer: CircuitBreakerLayer) -> Self {
        Self::judged_by(layer, Classifier::new())
    }

    /// The breaker and the retry above it share `classifier`, as in the preset.
    fn judged_by(layer: CircuitBreakerLayer, classifier: Classifier) -> Self {
        Self {
            layer: layer.classifier(classifier.clone()),
            classifier,
            script: Script::default(),
        }
    }

    /// One call of `steps.len()` attempts, each answered by its step.
    async fn call(&self, steps: &[Step]) {
        for n in 0..steps.len() {
            self.script.lock().unwrap().push_back(steps[n]);
            let script = self.script.clone();
            let svc = self
                .layer
                .layer(service_fn(move |_req: Request<()>| answer(script.clone())));
            let _ = svc.oneshot(attempt(&steps[..n], &self.classifier)).await;
        }
    }

    fn state(&self) -> CircuitState {
        let host = HostKey::from_request(&attempt(&[], &self.classifier));
        self.layer
            .handle()
            .state(&host)
            .unwrap_or(CircuitState::Closed)
    }
}

/// The preset's rule: calls in a row for a host that is not there, the rate for the rest.
fn by_calls() -> CircuitBreakerLayer {
    CircuitBreakerLayer::new()
        .failing_answers_for(Duration::from_secs(30))
        .failure_rate(FailureRate::new(0.5, Duration::from_secs(30), nz(20)).unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_calls_retries_count_once() {
    // Without a window, 5 failures in a row open: 4 calls of 3 failed attempts are 4.
    let run = Run::new(CircuitBreakerLayer::new());
    for _ in 0..4 {
        run.call(&[Step::Reset, Step::Reset, Step::Reset]).await;
    }
    assert_eq!(run.state(), CircuitState::Closed, "12 attempts, 4 calls");
    run.call(&[Step::Reset]).await;
    assert_eq!(run.state(), CircuitState::Open, "the fifth call");

    // A retry that follows only answers the breaker takes well (a 429) is the call's first
    // failure: the call is a failed one.
    let run = Run::new(by_calls());
    for _ in 0..19 {
        run.call(&[Step::Answer(429), Step::Reset]).await;
    }
    assert_eq!(
        run.state(),
        CircuitState::Closed,
        "19 calls, under the minimum"
    );
    run.call(&[Step::Answer(429), Step::Reset]).await;
    assert_eq!(
        run.state(),
        CircuitState::Open,
        "20 calls, every one failed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_host_that_is_not_there_opens_at_the_count_even_with_a_rate() {
    // Every attempt that finds nothing listening counts, a retry's too: nothing was sent.
    let run = Run::new(by_calls());
    run.call(&[Step::Refused, Step::Refused, Step::Refused])
        .await;
    assert_eq!(run.state(), CircuitState::Closed);
    run.call(&[Step::Refused]).await;
    assert_eq!(run.state(), CircuitState::Closed);
    run.call(&[Step::Refused]).await;
    assert_eq!(
        run.state(),
        CircuitState::Open,
        "5 refused connections in a row"
    );
    // A reset before them is the call's failure, counted once; the refusals still count.
    let run = Run::new(by_calls());
    run.call(&[Step::Reset, Step::Refused, Step::Refused]).await;
    run.call(&[Step::Refused, Step::Refused]).await;
    assert_eq!(run.state(), CircuitState::Open);
}

#[tokio::test(start_paused = true)]
async fn resets_after_the_request_went_out_never_open_at_the_count_with_a_rate() {
    // One call in six resets on every attempt, the others answer: the host stays closed, and
    // so it does when the resets come ten calls in a row among many answered ones.
    let run = Run::new(by_calls());
    for i in 0..600 {
        if i % 6 == 0 {
            run.call(&[Step::Reset, Step::Reset, Step::Reset]).await;
        } else {
            run.call(&[Step::Ok]).await;
        }
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    for _ in 0..10 {
        run.call(&[Step::Reset, Step::Reset, Step::Reset]).await;
    }
    assert_eq!(run.state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_host_where_most_calls_fail_at_the_transport_opens_by_the_rate() {
    // 60 % of the calls reset: open within the window's minimum of calls and a few more.
    let run = Run::new(by_calls());
    let mut calls = 0;
    while run.state() == CircuitState::Closed && calls < 1_000 {
        let steps: &[Step] = if calls % 5 < 3 {
            &[Step::Reset, Step::Reset]
        } else {
            &[Step::Ok]
        };
        run.call(steps).await;
        calls += 1;
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    assert_eq!(run.state(), CircuitState::Open);
    assert!(calls <= 25, "opened after {calls} calls");
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_succeeds_makes_its_call_a_success() {
    // Every call resets once, then succeeds: each call succeeded, and the rate sees none fail.
    let run = Run::new(by_calls());
    for _ in 0..200 {
        run.call(&[Step::Reset, Step::Ok]).await;
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    assert_eq!(run.state(), CircuitState::Closed);
    // Once those have left the window, the same calls without their retries' success: every
    // call failed.
    tokio::time::advance(Duration::from_secs(31)).await;
    for _ in 0..20 {
        run.call(&[Step::Reset, Step::Reset]).await;
    }
    assert_eq!(run.state(), CircuitState::Open);
}

#[tokio::test(start_paused = true)]
async fn failing_answers_keep_their_own_rule_beside_the_rate() {
    // 503 to everything: the rate leaves answers to the run, which opens once it has lasted.
    let run = Run::new(by_calls());
    for _ in 0..290 {
        run.call(&[Step::Answer(503), Step::Answer(503), Step::Answer(503)])
            .await;
        tokio::time::advance(Duration::from_millis(100)).await;
    }
    assert_eq!(run.state(), CircuitState::Closed, "29 s of failing answers");
    for _ in 0..20 {
        run.call(&[Step::Answer(503)]).await;
        tokio::time::advance(Duration::from_millis(100)).await;
    }
    assert_eq!(run.state(), CircuitState::Open, "past 30 s");
}

#[tokio::test(start_paused = true)]
async fn one_unlucky_trial_does_not_keep_a_serving_host_out() {
    let run = Run::new(by_calls().half_open_trials(nz(5)));
    for _ in 0..5 {
        run.call(&[Step::Refused]).await;
    }
    assert_eq!(run.state(), CircuitState::Open);
    tokio::time::advance(Duration::from_secs(30)).await;
    // The first trial lands on a broken path; the next ones are served.
    run.call(&[Step::Reset]).await;
    assert_eq!(run.state(), CircuitState::HalfOpen);
    run.call(&[Step::Ok]).await;
    run.call(&[Step::Ok]).await;
    assert_eq!(run.state(), CircuitState::HalfOpen);
    run.call(&[Step::Ok]).await;
    assert_eq!(run.state(), CircuitState::Closed, "three of five served");
}

#[tokio::test(start_paused = true)]
async fn a_retry_reads_the_verdicts_of_its_calls_earlier_attempts() {
    // A 409 declared transient counts against the host; a call's three of them count once.
    let conflicts_count =
        Classifier::new().reclassify(|head: &ResponseHead<'_>, verdict| match head.status() {
            StatusCode::CONFLICT => Verdict::transient(),
            _ => verdict,
        });
    let conflicts = [Step::Answer(409), Step::Answer(409), Step::Answer(409)];
    let run = Run::judged_by(CircuitBreakerLayer::new(), conflicts_count);
    for _ in 0..4 {
        run.call(&conflicts).await;
    }
    assert_eq!(run.state(), CircuitState::Closed, "12 attempts, 4 calls");
    run.call(&[Step::Answer(409)]).await;
    assert_eq!(run.state(), CircuitState::Open, "the fifth call");

    // The default classifier: a 409 never counts.
    let run = Run::new(CircuitBreakerLayer::new());
    for _ in 0..10 {
        run.call(&conflicts).await;
    }
    assert_eq!(run.state(), CircuitState::Closed);
}
