//! `/items` (Link pagination) and `/cursor` (cursor pagination) over the same 23 items.

use courier_core::excerpt::Excerpt;
use http::{HeaderValue, Request, StatusCode, header};
use serde_json::json;

use crate::routes::{Resp, bad_request, json, number_param, query_param, text};

/// How many items there are.
pub(crate) const ITEMS: u64 = 23;
/// The largest page.
pub(crate) const MAX_PER_PAGE: u64 = 10;

fn items_json(from: u64, to: u64) -> Vec<serde_json::Value> {
    (from..to).map(|i| json!({ "id": i + 1 })).collect()
}

/// `GET /items?page=&per_page=`: pages numbered from 1, `Link` with next, last (and first,
/// prev past the first page), relative URLs.
pub(crate) fn items<B>(req: &Request<B>) -> Resp {
    let (page, per_page) = match (
        number_param(req.uri(), "page", 1),
        number_param(req.uri(), "per_page", 1),
    ) {
        (Ok(page), Ok(per_page)) => (
            page.unwrap_or(1),
            per_page.unwrap_or(MAX_PER_PAGE).min(MAX_PER_PAGE),
        ),
        (Err(message), _) | (_, Err(message)) => return bad_request(&message),
    };
    let last = ITEMS.div_ceil(per_page);
    let from = page.saturating_sub(1).saturating_mul(per_page).min(ITEMS);
    let to = from.saturating_add(per_page).min(ITEMS);
    let link =
        |page: u64, rel: &str| format!("</items?page={page}&per_page={per_page}>; rel=\"{rel}\"");
    let mut links = Vec::new();
    if page < last {
        links.push(link(page + 1, "next"));
    }
    links.push(link(last, "last"));
    if page > 1 {
        links.push(link(1, "first"));
        if page <= last {
            links.push(link(page - 1, "prev"));
        }
    }
    let mut resp = json(StatusCode::OK, &items_json(from, to));
    if let Ok(value) = HeaderValue::from_str(&links.join(", ")) {
        resp.headers_mut().insert(header::LINK, value);
    }
    resp
}

/// `GET /cursor?limit=&cursor=`: `{"items": [...], "next_cursor": "..." | null}`.
pub(crate) fn cursor<B>(req: &Request<B>) -> Resp {
    let limit = match number_param(req.uri(), "limit", 1) {
        Ok(limit) => limit.unwrap_or(MAX_PER_PAGE).min(MAX_PER_PAGE),
        Err(message) => return bad_request(&message),
    };
    let from = match query_param(req.uri(), "cursor") {
        None => 0,
        Some(raw) => match decode_cursor(&raw) {
            Some(offset) => offset,
            None => {
                return text(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "cursor \"{}\" is not one this server gave out; start without a cursor \
                         and pass next_cursor back unchanged\n",
                        Excerpt::new(&raw)
                    ),
                );
            }
        },
    };
    let to = from.saturating_add(limit).min(ITEMS);
    let next = (to < ITEMS).then(|| encode_cursor(to));
    json(
        StatusCode::OK,
        &json!({ "items": items_json(from, to), "next_cursor": next }),
    )
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// An opaque cursor: unpadded base64url of `offset:N`.
pub(crate) fn encode_cursor(offset: u64) -> String {
    let raw = format!("offset:{offset}");
    let mut out = String::new();
    for chunk in raw.as_bytes().chunks(3) {
        let mut n = 0u32;
        for (i, b) in chunk.iter().enumerate() {
            n |= u32::from(*b) << (16 - 8 * i);
        }
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// The offset in a cursor from [`encode_cursor`]; `None` for anything else, or past the end.
pub(crate) fn decode_cursor(cursor: &str) -> Option<u64> {
    let mut bytes = Vec::new();
    for chunk in cursor.as_bytes().chunks(4) {
        if chunk.len() < 2 {
            return None;
        }
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let v = ALPHABET.iter().position(|a| a == c)?;
            n |= (v as u32) << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            bytes.push((n >> (16 - 8 * i)) as u8);
        }
    }
    let offset: u64 = std::str::from_utf8(&bytes)
        .ok()?
        .strip_prefix("offset:")?
        .parse()
        .ok()?;
    // Only the spelling this server gives out: no stray bits, no `+1`, no leading zeros.
    (offset <= ITEMS && encode_cursor(offset) == cursor).then_some(offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cursor_is_base64url_of_the_offset() {
        assert_eq!(encode_cursor(10), "b2Zmc2V0OjEw");
        assert_eq!(decode_cursor("b2Zmc2V0OjEw"), Some(10));
        assert_eq!(decode_cursor("b2Zmc2V0OjIw"), Some(20));
        assert_eq!(decode_cursor(&encode_cursor(24)), None, "past the end");
        for bad in [
            "",
            "x",
            "b2Zmc2V0OjEx=",
            "!!!!",
            "b2Zmc2V0Oi0x",
            "b2Zmc2V0OjEx",
        ] {
            if bad == "b2Zmc2V0OjEx" {
                assert_eq!(decode_cursor(bad), Some(11));
            } else {
                assert_eq!(decode_cursor(bad), None, "{bad:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn cursor_round_trips(offset in 0..=ITEMS) {
            prop_assert_eq!(decode_cursor(&encode_cursor(offset)), Some(offset));
        }

        #[test]
        fn any_text_decodes_without_panicking(text in ".{0,40}") {
            if let Some(offset) = decode_cursor(&text) {
                prop_assert_eq!(encode_cursor(offset), text);
            }
        }
    }
}
