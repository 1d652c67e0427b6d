//! Any header value, on the request or the response: no panic, and a response marked as coming
//! from the store carries the stored body.

mod common;

use common::*;
use courier_core::CacheStatus;
use http::{HeaderName, HeaderValue, Method, Response};
use proptest::prelude::*;
use std::time::Duration;
use tower::Layer;

const URL: &str = "http://api.example/p";

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,40}",
        Just("max-age=99999999999999999999999".to_owned()),
        Just("max-age=-1, stale-if-error=abc".to_owned()),
        Just("W/\"1\"".to_owned()),
        Just("\"1\"".to_owned()),
        Just("1".to_owned()),
        Just("W/1".to_owned()),
        Just("*".to_owned()),
        Just("Thu, 01 Jan 1970 00:00:00 GMT".to_owned()),
        Just("Fri, 31 Dec 9999 23:59:59 GMT".to_owned()),
        Just("18446744073709551616".to_owned()),
    ]
}

const RESPONSE_FIELDS: [&str; 9] = [
    "etag",
    "last-modified",
    "cache-control",
    "vary",
    "expires",
    "date",
    "age",
    "content-length",
    "location",
];

const REQUEST_FIELDS: [&str; 6] = [
    "cache-control",
    "if-none-match",
    "authorization",
    "accept",
    "cookie",
    "range",
];

fn build_response(fields: &[(usize, String)], status: u16, body: &'static str) -> Answer {
    let mut response = Response::builder().status(status);
    for (i, v) in fields {
        if let Ok(v) = HeaderValue::from_str(v) {
            let name = HeaderName::from_static(RESPONSE_FIELDS[i % RESPONSE_FIELDS.len()]);
            if name != "content-length" {
                response = response.header(name, v);
            }
        }
    }
    Ok(response
        .header("content-length", body.len())
        .body(full(body))
        .unwrap())
}

fn build_request(fields: &[(usize, String)], method: Method) -> http::Request<()> {
    let mut request = http::Request::builder().method(method).uri(URL);
    for (i, v) in fields {
        if let Ok(v) = HeaderValue::from_str(v) {
            request = request.header(REQUEST_FIELDS[i % REQUEST_FIELDS.len()], v);
        }
    }
    request.body(()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_header_values_are_survived(
        first in proptest::collection::vec((0usize..64, value()), 0..8),
        second in proptest::collection::vec((0usize..64, value()), 0..8),
        request in proptest::collection::vec((0usize..64, value()), 0..4),
        second_status in prop_oneof![Just(200u16), Just(304), Just(503)],
        wait in 0u64..200,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let mock = Mock::new();
            let mut svc = layer().layer(mock.service());
            mock.push(build_response(&first, 200, "first"));
            let got = send(&mut svc, build_request(&request, Method::GET)).await.unwrap();
            assert_eq!(got.body, "first");
            let stored_weight = svc.store().expect("an active cache").weight();
            assert!(stored_weight <= courier_cache::DEFAULT_CAPACITY);

            tokio::time::advance(Duration::from_secs(wait)).await;
            mock.push(build_response(&second, second_status, if second_status == 304 { "" } else { "second" }));
            // The answer to the request sent again when the 304 selects nothing.
            mock.push(build_response(&[], 200, "again"));
            let calls = mock.calls();
            let got = send(&mut svc, build_request(&request, Method::GET)).await.unwrap();
            let sent = mock.calls() - calls;
            match got.cache {
                CacheStatus::Hit => {
                    assert_eq!(sent, 0, "a hit sends nothing");
                    assert_eq!(got.body, "first");
                }
                CacheStatus::Revalidated | CacheStatus::Stale => {
                    assert_eq!(sent, 1);
                    assert_eq!(got.body, "first");
                }
                CacheStatus::Miss | CacheStatus::Bypass if sent == 2 => {
                    assert_eq!(second_status, 304, "only a 304 is asked again");
                    assert!(mock.last().headers.get("if-none-match").is_none());
                    assert_eq!(got.body, "again");
                }
                CacheStatus::Miss | CacheStatus::Bypass => {
                    assert_eq!(sent, 1);
                    if second_status != 304 {
                        assert_eq!(got.body, "second");
                    }
                }
                other => panic!("unexpected status {other:?}"),
            }
            mock.discard_answers();
            // HEAD afterwards never fails either.
            mock.push(build_response(&second, 200, ""));
            let head = send(&mut svc, build_request(&request, Method::HEAD)).await.unwrap();
            assert!(head.body.is_empty());
        });
    }
}
