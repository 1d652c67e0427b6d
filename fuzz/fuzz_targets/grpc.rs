#![no_main]
//! gRPC's header fields on arbitrary bytes: nothing may panic; a `grpc-timeout` that reads
//! back encodes to one that reads no shorter, within one unit; a pushback is a wait or a
//! refusal, never absent when the field is there.

use courier_core::grpc::{
    GRPC_RETRY_PUSHBACK_MS, GRPC_STATUS, GrpcCode, Pushback, decode_timeout, encode_timeout,
    status_in_headers,
};
use http::{HeaderMap, HeaderValue, header::CONTENT_TYPE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(value) = HeaderValue::from_bytes(bytes) else {
        return;
    };
    if let Some(left) = decode_timeout(&value) {
        let again = decode_timeout(&encode_timeout(left)).expect("an encoded timeout reads back");
        assert!(again >= left, "{value:?}: {left:?} -> {again:?}");
    }
    let code = GrpcCode::from_header(&value);
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, value.clone());
    headers.insert(GRPC_RETRY_PUSHBACK_MS, value);
    assert_eq!(status_in_headers(&headers), code);
    assert!(Pushback::parse(&headers).is_some());
});
