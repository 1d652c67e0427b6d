use super::*;
use crate::CallContext;
use std::io;

fn head_of(status: u16, pairs: &[(&str, &str)]) -> (StatusCode, HeaderMap) {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    (StatusCode::from_u16(status).unwrap(), h)
}

fn verdict(c: &Classifier, status: u16, pairs: &[(&str, &str)]) -> Verdict {
    let (status, headers) = head_of(status, pairs);
    let ext = http::Extensions::new();
    c.classify_response(&ResponseHead::new(status, Version::HTTP_11, &headers, &ext))
}

/// (class, may change, against the host)
fn facts(v: Verdict) -> (Class, bool, bool) {
    (v.class(), v.may_change(), v.counts_against_host())
}

const FAILED: Class = Class::Failed;
const BARE: Class = Class::Overload { hinted: false };
const HINTED: Class = Class::Overload { hinted: true };

#[test]
fn the_default_verdicts_are_the_table_of_the_module_docs() {
    let c = Classifier::new();
    for s in [100, 200, 201, 204, 301, 304, 307] {
        assert_eq!(
            facts(verdict(&c, s, &[])),
            (Class::Success, false, false),
            "{s}"
        );
    }
    assert_eq!(facts(verdict(&c, 408, &[])), (FAILED, true, false));
    assert_eq!(facts(verdict(&c, 429, &[])), (BARE, true, false));
    assert_eq!(
        facts(verdict(&c, 429, &[("retry-after", "3")])),
        (HINTED, true, false)
    );
    for s in [500, 502, 504] {
        assert_eq!(facts(verdict(&c, s, &[])), (FAILED, true, true), "{s}");
    }
    assert_eq!(facts(verdict(&c, 503, &[])), (BARE, true, true));
    assert_eq!(
        facts(verdict(&c, 503, &[("retry-after", "3")])),
        (HINTED, true, true)
    );
    assert_eq!(
        facts(verdict(&c, 503, &[("retry-after", "garbage")])),
        (BARE, true, true),
        "an unreadable hint counts as absent"
    );
    assert_eq!(
        facts(verdict(&c, 403, &[("retry-after", "3")])),
        (HINTED, true, false)
    );
    assert_eq!(
        facts(verdict(&c, 403, &[("x-ratelimit-remaining", "0")])),
        (HINTED, true, false)
    );
    for s in [400, 401, 403, 404, 409, 422, 501, 505] {
        assert_eq!(facts(verdict(&c, s, &[])), (FAILED, false, false), "{s}");
    }
}

#[test]
fn the_default_verdicts_agree_with_the_status_rules_of_classify() {
    let c = Classifier::new();
    for s in 100..1000u16 {
        let Ok(status) = StatusCode::from_u16(s) else {
            continue;
        };
        let v = verdict(&c, s, &[]);
        assert_eq!(
            v.may_change(),
            crate::classify::may_change(status, &HeaderMap::new()),
            "{s}"
        );
        assert_eq!(
            v.counts_against_host(),
            FAILURE_STATUSES.contains(&status),
            "{s}"
        );
        assert_eq!(
            v.is_overload_signal(),
            OVERLOAD_STATUSES.contains(&status),
            "{s}"
        );
    }
}

fn grpc(c: &Classifier, code: u16, pushback: bool) -> Verdict {
    let mut pairs = vec![("content-type", "application/grpc")];
    let code = code.to_string();
    pairs.push(("grpc-status", &code));
    if pushback {
        pairs.push(("grpc-retry-pushback-ms", "100"));
    }
    verdict(c, 200, &pairs)
}

#[test]
fn grpc_answers_are_judged_by_their_code() {
    let c = Classifier::new();
    assert_eq!(facts(grpc(&c, 0, false)), (Class::Success, false, false));
    assert_eq!(facts(grpc(&c, 14, false)), (BARE, true, true));
    assert_eq!(facts(grpc(&c, 14, true)), (HINTED, true, true));
    assert_eq!(facts(grpc(&c, 8, false)), (BARE, false, false));
    assert_eq!(facts(grpc(&c, 8, true)), (HINTED, false, false));
    for code in [1, 2, 3, 4, 5, 13, 16] {
        assert_eq!(
            facts(grpc(&c, code, false)),
            (FAILED, false, false),
            "{code}"
        );
    }
    // A gRPC answer that goes on to send messages carries no status in its headers.
    let v = verdict(&c, 200, &[("content-type", "application/grpc")]);
    assert!(v.is_success());
    let c = c
        .grpc_retryable_codes([GrpcCode::INTERNAL])
        .grpc_failure_codes([GrpcCode::INTERNAL])
        .grpc_overload_codes([]);
    assert_eq!(facts(grpc(&c, 13, false)), (FAILED, true, true));
    assert_eq!(facts(grpc(&c, 14, false)), (FAILED, false, false));
}

#[test]
fn failures_are_judged_by_their_kind() {
    let c = Classifier::new();
    let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
    assert_eq!(
        facts(c.classify_error(&refused)),
        (Class::Failure(FailureKind::Connect), true, true)
    );
    for (kind, retryable, against) in [
        (FailureKind::Connect, true, true),
        (FailureKind::Timeout, true, true),
        (FailureKind::Read, true, true),
        (FailureKind::Tls, false, false),
        (FailureKind::Local, false, false),
        (FailureKind::Other, false, true),
    ] {
        let v = Verdict::failure(kind);
        assert_eq!(
            facts(v),
            (Class::Failure(kind), retryable, against),
            "{kind:?}"
        );
        assert_eq!(v.failure_kind(), Some(kind));
        assert_eq!(v.class().as_str(), kind.as_str());
    }
    let result: Result<http::Response<()>, BoxError> = Err(Box::new(refused));
    assert_eq!(
        c.classify_result(&result).failure_kind(),
        Some(FailureKind::Connect)
    );
}

#[test]
fn settings_change_their_own_half_of_the_verdict() {
    let c = Classifier::new()
        .retryable_statuses([StatusCode::CONFLICT])
        .unwrap()
        .failure_statuses([StatusCode::CONFLICT])
        .overload_statuses([StatusCode::SERVICE_UNAVAILABLE]);
    assert_eq!(facts(verdict(&c, 409, &[])), (FAILED, true, true));
    assert_eq!(facts(verdict(&c, 503, &[])), (BARE, false, false));
    assert_eq!(facts(verdict(&c, 429, &[])), (FAILED, false, false));
    assert_eq!(facts(verdict(&c, 500, &[])), (FAILED, false, false));
    let off = Classifier::new().rate_limit_403(false);
    assert_eq!(
        facts(verdict(&off, 403, &[("retry-after", "3")])),
        (FAILED, false, false)
    );
    let err = Classifier::new()
        .retryable_statuses([StatusCode::OK])
        .unwrap_err();
    assert!(err.to_string().contains("400 to 599"), "{err}");
}

#[test]
fn a_function_of_yours_has_the_last_word() {
    let c = Classifier::new().reclassify(|head, verdict| {
        if head.status() == StatusCode::CONFLICT {
            Verdict::transient()
        } else if head.headers().contains_key("x-throttled") {
            Verdict::overload(false).against_host(true)
        } else {
            verdict
        }
    });
    assert_eq!(facts(verdict(&c, 409, &[])), (FAILED, true, true));
    let throttled = verdict(&c, 200, &[("x-throttled", "1")]);
    assert_eq!(facts(throttled), (BARE, true, true));
    assert!(throttled.is_overload_signal());
    assert!(verdict(&c, 200, &[]).is_success());
    assert_eq!(facts(verdict(&c, 503, &[])), (BARE, true, true));
}

#[test]
fn a_verdict_put_on_the_answer_by_a_layer_below_wins() {
    let c = Classifier::new();
    let headers = HeaderMap::new();
    let mut ext = http::Extensions::new();
    ext.insert(Verdict::transient());
    let head = ResponseHead::new(StatusCode::OK, Version::HTTP_11, &headers, &ext);
    assert_eq!(c.classify_response(&head), Verdict::transient());
    assert!(c.classify_head(&head).is_success());
}

#[test]
fn body_rules_are_bounded() {
    let f = |_: &ResponseHead<'_>, _: &[u8], v: Verdict| v;
    assert!(Classifier::new().classify_body(0, f).is_err());
    assert!(
        Classifier::new()
            .classify_body(MAX_BODY_LIMIT + 1, f)
            .is_err()
    );
    let c = Classifier::new().classify_body(4096, f).unwrap();
    assert_eq!(c.body_rule().map(BodyRule::limit), Some(4096));
    assert!(Classifier::new().body_rule().is_none());
}

#[tokio::test(start_paused = true)]
async fn retry_safety_reads_the_method_the_key_the_marker_and_the_paths() {
    let c = Classifier::new().retry_safe_paths(["/search", "/pkg.Svc/"]);
    let safe = |req: &http::Request<()>| c.is_retry_safe(&RequestHead::new(req));
    let post = |uri: &str| http::Request::post(uri).body(()).unwrap();
    assert!(safe(&http::Request::get("http://h/x").body(()).unwrap()));
    assert!(!safe(&post("http://h/x")));
    assert!(safe(&post("http://h/search")));
    assert!(!safe(&post("http://h/search/more")));
    assert!(safe(&post("http://h/pkg.Svc/Get")));
    let mut keyed = post("http://h/x");
    keyed
        .headers_mut()
        .insert("idempotency-key", "k1".parse().unwrap());
    assert!(safe(&keyed));
    let mut marked = post("http://h/x");
    marked.extensions_mut().insert(RetrySafe);
    CallContext::get_or_insert(&mut marked)
        .shrink_deadline_after(std::time::Duration::from_secs(1));
    assert!(safe(&marked));
    let none = Classifier::new().idempotent_methods([]);
    assert!(!none.is_retry_safe(&RequestHead::new(
        &http::Request::get("http://h/").body(()).unwrap()
    )));
}

#[test]
fn sets_print_their_members() {
    let c = Classifier::new();
    let text = format!("{c:?}");
    assert!(text.contains("500, 502, 503, 504"), "{text}");
    assert!(
        text.contains("UNAVAILABLE") || text.contains("14"),
        "{text}"
    );
}
