//! The input of `courier batch`: lines read with a bound on their length, and each line turned
//! into a request (`URL`, `METHOD URL`, or a JSON object).

use std::io;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, header};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use url::Url;

use courier::core::excerpt::Excerpt;

use crate::parse;

/// The longest line read; a longer one is reported and skipped, not held in memory.
pub(crate) const MAX_LINE: usize = 1 << 20;

/// What a line holds, as the help says it.
const FORMS: &str = "write URL, METHOD URL, or a JSON object such as \
                     {\"method\": \"POST\", \"url\": \"http://host/x\", \"headers\": \
                     {\"Content-Type\": \"text/plain\"}, \"body\": \"hi\"}";

/// One request of a batch.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

// === impl Spec ===

impl Spec {
    /// The request, with `common` headers under the line's own (a line's header replaces a
    /// common one of the same name).
    pub(crate) fn request(&self, common: &HeaderMap) -> http::Request<http_body_util::Full<Bytes>> {
        let mut headers = common.clone();
        for name in self.headers.keys() {
            headers.remove(name);
        }
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        crate::plan::build_request(
            &self.method,
            &self.url,
            headers,
            http_body_util::Full::new(self.body.clone()),
        )
    }
}

/// The request a line asks for; `Ok(None)` for a blank line or a `#` comment.
pub(crate) fn parse_line(line: &str) -> Result<Option<Spec>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    if line.starts_with('{') {
        return parse_json(line).map(Some);
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let (method, url) = match words[..] {
        [url] => (Method::GET, url),
        [method, url] => (
            parse::method(method).map_err(|e| format!("{e}; {FORMS}"))?,
            url,
        ),
        _ => return Err(format!("{} words; {FORMS}", words.len())),
    };
    let url = parse::url(url).map_err(|e| format!("\"{}\": {e}", Excerpt::new(url)))?;
    Ok(Some(Spec {
        method,
        url,
        headers: HeaderMap::new(),
        body: Bytes::new(),
    }))
}

fn parse_json(line: &str) -> Result<Spec, String> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}; {FORMS}"))?;
    let Value::Object(fields) = value else {
        return Err(format!("not a JSON object; {FORMS}"));
    };
    let mut url = None;
    let mut method = None;
    let mut headers = HeaderMap::new();
    let mut body = None;
    let mut json_body = false;
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("url", Value::String(s)) => {
                url =
                    Some(parse::url(&s).map_err(|e| format!("url \"{}\": {e}", Excerpt::new(&s)))?);
            }
            ("method", Value::String(s)) => {
                method = Some(
                    parse::method(&s)
                        .map_err(|e| format!("method \"{}\": {e}", Excerpt::new(&s)))?,
                );
            }
            ("headers", value) => headers = json_headers(value)?,
            ("body", Value::Null) => {}
            ("body", Value::String(s)) => body = Some(Bytes::from(s)),
            ("body", other) => {
                body = Some(Bytes::from(other.to_string()));
                json_body = true;
            }
            (key @ ("url" | "method"), other) => {
                return Err(format!(
                    "{key} must be a string, not {}",
                    Excerpt::new(&other.to_string())
                ));
            }
            (other, _) => {
                return Err(format!(
                    "unknown field \"{}\"; a line's object has url, method, headers and body",
                    Excerpt::new(other)
                ));
            }
        }
    }
    let url = url.ok_or_else(|| format!("the object has no url; {FORMS}"))?;
    if json_body && !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    let method = method.unwrap_or(if body.is_some() {
        Method::POST
    } else {
        Method::GET
    });
    Ok(Spec {
        method,
        url,
        headers,
        body: body.unwrap_or_default(),
    })
}

/// `{"Name": "value", "X": ["a", "b"]}` or `["Name: value", ...]`.
fn json_headers(value: Value) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    let mut add = |name: &str, value: &str| -> Result<(), String> {
        let (name, value) = parse::header_parts(name, value)?;
        headers.append(name, value);
        Ok(())
    };
    match value {
        Value::Object(map) => {
            for (name, value) in map {
                match value {
                    Value::String(v) => add(&name, &v)?,
                    Value::Array(values) => {
                        for v in values {
                            let Value::String(v) = v else {
                                return Err(format!(
                                    "header \"{}\": values are strings",
                                    Excerpt::new(&name)
                                ));
                            };
                            add(&name, &v)?;
                        }
                    }
                    other => {
                        return Err(format!(
                            "header \"{}\": {} is not a string",
                            Excerpt::new(&name),
                            Excerpt::new(&other.to_string())
                        ));
                    }
                }
            }
        }
        Value::Array(lines) => {
            for line in lines {
                let Value::String(line) = line else {
                    return Err("headers as an array are strings, 'Name: value'".to_owned());
                };
                let (name, value) = parse::header(&line)?;
                headers.append(name, value);
            }
        }
        _ => {
            return Err(
                "headers are an object {\"Name\": \"value\"} or an array [\"Name: value\"]"
                    .to_owned(),
            );
        }
    }
    Ok(headers)
}

/// Reads lines of at most [`MAX_LINE`] bytes, numbered from 1.
#[derive(Debug)]
pub(crate) struct LineReader<R> {
    reader: R,
    line: Vec<u8>,
    too_long: bool,
    number: u64,
}

// === impl LineReader ===

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub(crate) fn new(reader: R) -> Self {
        Self {
            reader,
            line: Vec::new(),
            too_long: false,
            number: 0,
        }
    }

    /// Lines returned so far.
    pub(crate) fn lines_read(&self) -> u64 {
        self.number
    }

    /// The next line (without `\n` or `\r\n`) and its number, or `Err(message)` in its place
    /// when it is too long or not UTF-8; `Ok(None)` at the end of the input.
    ///
    /// Cancel-safe: bytes are taken from the reader only between two awaits, so a call dropped
    /// halfway (in a `select!`) loses nothing, and the next call goes on with the same line.
    pub(crate) async fn next(&mut self) -> io::Result<Option<(u64, Result<String, String>)>> {
        loop {
            let chunk = self.reader.fill_buf().await?;
            if chunk.is_empty() {
                if self.line.is_empty() && !self.too_long {
                    return Ok(None);
                }
                return Ok(Some(self.take()));
            }
            let (part, used, ends) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..i], i + 1, true),
                None => (chunk, chunk.len(), false),
            };
            if !self.too_long {
                if self.line.len() + part.len() > MAX_LINE {
                    self.too_long = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            self.reader.consume(used);
            if ends {
                return Ok(Some(self.take()));
            }
        }
    }

    fn take(&mut self) -> (u64, Result<String, String>) {
        self.number += 1;
        let mut bytes = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.too_long) {
            return (
                self.number,
                Err(format!(
                    "the line is longer than {MAX_LINE} bytes; send a large body with \
                     `courier request -d @FILE`"
                )),
            );
        }
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            format!(
                "the line is not UTF-8 text (invalid byte at {})",
                e.utf8_error().valid_up_to()
            )
        });
        (self.number, text)
    }
}

/// How many lines of `input` hold a request (neither blank nor `#` comments), for the length
/// of the progress bar. Reads with a fixed buffer, whatever the length of a line.
pub(crate) fn count_requests(mut input: impl io::Read) -> io::Result<u64> {
    let mut count = 0;
    // Whether this line was counted or skipped already (false: blanks only so far).
    let mut decided = false;
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return Ok(count),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for &b in &buf[..n] {
            match b {
                b'\n' => decided = false,
                _ if decided => {}
                b' ' | b'\t' | b'\r' | 0x0b | 0x0c => {}
                b'#' => decided = true,
                _ => {
                    count += 1;
                    decided = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(line: &str) -> Spec {
        parse_line(line)
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .expect("a request")
    }

    #[test]
    fn a_line_is_a_url_a_method_and_url_or_an_object() {
        let s = spec("http://127.0.0.1:1/a");
        assert_eq!(
            (s.method, s.url.as_str()),
            (Method::GET, "http://127.0.0.1:1/a")
        );
        let s = spec("  delete   http://127.0.0.1:1/a\t");
        assert_eq!(s.method, Method::DELETE);
        let s = spec(
            r#"{"url": "http://127.0.0.1:1/a", "headers": {"X-A": ["1", "2"], "X-B": "3"}, "body": "hi"}"#,
        );
        assert_eq!(s.method, Method::POST, "a body without a method is a POST");
        assert_eq!(s.body, "hi");
        assert_eq!(s.headers.get_all("x-a").iter().count(), 2);
        assert_eq!(s.headers["x-b"], "3");
        assert!(!s.headers.contains_key(header::CONTENT_TYPE));
        let s = spec(r#"{"method": "put", "url": "http://127.0.0.1:1/a", "body": {"n": 1}}"#);
        assert_eq!(s.method, Method::PUT);
        assert_eq!(s.body, r#"{"n":1}"#);
        assert_eq!(s.headers[header::CONTENT_TYPE], "application/json");
        let s = spec(r#"{"url": "http://127.0.0.1:1/a", "headers": ["X-C: 4"]}"#);
        assert_eq!(s.method, Method::GET);
        assert_eq!(s.headers["x-c"], "4");
    }

    #[test]
    fn blank_lines_and_comments_are_skipped() {
        for line in ["", "   ", "\t", "# a note", "  # indented"] {
            assert!(matches!(parse_line(line), Ok(None)), "{line:?}");
        }
    }

    #[test]
    fn a_bad_line_says_what_is_wrong() {
        for (line, says) in [
            ("not a url", "words"),
            ("/relative", "absolute URL"),
            ("GE@T http://127.0.0.1/", "method"),
            ("ftp://127.0.0.1/", "not http or https"),
            ("{\"url\": 3}", "url must be a string"),
            ("{\"method\": \"GET\"}", "no url"),
            (
                "{\"url\": \"http://127.0.0.1/\", \"header\": {}}",
                "unknown field \"header\"",
            ),
            (
                "{\"url\": \"http://127.0.0.1/\", \"headers\": {\"X\": 1}}",
                "not a string",
            ),
            (
                "{\"url\": \"http://127.0.0.1/\", \"headers\": [\"nocolon\"]}",
                "Name: value",
            ),
            (
                "{\"url\": \"http://127.0.0.1/\", \"headers\": {\"Content-Length\": \"1\"}}",
                "from -d",
            ),
            ("{\"url\": ", "not a JSON object"),
            (
                "{\"url\": \"http://127.0.0.1/\"} trailing",
                "not a JSON object",
            ),
        ] {
            match parse_line(line) {
                Err(e) => assert!(e.contains(says), "{line:?}: {e}"),
                Ok(other) => panic!("{line:?} was accepted: {other:?}"),
            }
        }
    }

    #[test]
    fn line_headers_replace_common_ones_of_the_same_name() {
        let s = spec(r#"{"url": "http://127.0.0.1:1/a", "headers": {"X-A": "mine"}}"#);
        let mut common = HeaderMap::new();
        common.insert("x-a", HeaderValue::from_static("common"));
        common.insert("x-b", HeaderValue::from_static("common"));
        let req = s.request(&common);
        assert_eq!(req.headers()["x-a"], "mine");
        assert_eq!(req.headers()["x-b"], "common");
    }

    async fn read_all(input: &[u8]) -> Vec<(u64, Result<String, String>)> {
        let mut reader = LineReader::new(tokio::io::BufReader::with_capacity(7, input));
        let mut lines = Vec::new();
        while let Some(line) = reader.next().await.unwrap() {
            lines.push(line);
        }
        lines
    }

    #[tokio::test]
    async fn lines_are_numbered_and_bounded() {
        let lines = read_all(b"a\r\nb\n\nlast").await;
        let ok: Vec<_> = lines
            .iter()
            .map(|(n, l)| (*n, l.clone().unwrap()))
            .collect();
        assert_eq!(
            ok,
            [
                (1, "a".into()),
                (2, "b".into()),
                (3, String::new()),
                (4, "last".into())
            ]
        );

        let mut input = vec![b'x'; MAX_LINE + 1];
        input.extend_from_slice(b"\nnext\n\xff\xfe\n");
        let lines = read_all(&input).await;
        assert_eq!(lines.len(), 3);
        assert!(lines[0].1.as_ref().unwrap_err().contains("longer than"));
        assert_eq!(lines[1], (2, Ok("next".into())));
        assert!(lines[2].1.as_ref().unwrap_err().contains("not UTF-8"));

        let exactly = vec![b'y'; MAX_LINE];
        let lines = read_all(&exactly).await;
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].1.as_ref().map(String::len), Ok(MAX_LINE));
    }

    #[test]
    fn requests_are_counted_without_blank_lines_and_comments() {
        let input = b"http://a/\n\n  # note\n\t\r\nGET http://b/\n{\"url\":\"#\"}";
        assert_eq!(count_requests(&input[..]).unwrap(), 3);
        assert_eq!(count_requests(&b""[..]).unwrap(), 0);
    }
}
