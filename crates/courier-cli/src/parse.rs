//! Value parsers for the command line. Each returns a message that says what is wrong and what
//! to write instead; clap prints it and exits with status 2.
//!
//! Every parser is handed to clap through [`checked`], which quotes the refused value as an
//! [`Excerpt`] (a bounded prefix, control characters escaped) rather than whole, as clap's own
//! message would: a 100 kB argument makes a line of a few hundred bytes, and a CR-LF in it
//! cannot forge a second line wherever stderr is collected. The parsers' own messages quote
//! input the same way.

use std::ffi::OsStr;
use std::num::NonZeroU32;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use courier::core::excerpt::Excerpt;
use courier::ratelimit::Rate;
use http::{HeaderName, HeaderValue, Method};
use url::Url;

/// `parse` as a clap value parser whose error quotes the value as an [`Excerpt`].
pub(crate) fn checked<T, F>(parse: F) -> Checked<F>
where
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    Checked(parse)
}

/// A value parser made by [`checked`].
#[derive(Clone)]
pub(crate) struct Checked<F>(F);

impl<T, F> TypedValueParser for Checked<F>
where
    F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let name = arg.map_or_else(|| "...".to_owned(), ToString::to_string);
        let refuse = |shown: Excerpt<'_>, why: &str| {
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!("invalid value '{shown}' for '{name}': {why}\n"),
            )
            .with_cmd(cmd)
        };
        let Some(text) = value.to_str() else {
            return Err(refuse(
                Excerpt::bytes(value.as_encoded_bytes()),
                "not UTF-8 text",
            ));
        };
        (self.0)(text).map_err(|why| refuse(Excerpt::new(text), &why))
    }
}

/// An HTTP method, upper-cased (`get` sends `GET`).
pub(crate) fn method(s: &str) -> Result<Method, String> {
    Method::from_bytes(s.to_ascii_uppercase().as_bytes())
        .map_err(|_| "a method is one token of letters, such as GET or POST".to_owned())
}

/// An absolute `http://` or `https://` URL with a host, without its fragment.
///
/// A control character anywhere (a tab, a newline) is refused: the URL parser would drop it
/// silently and send another URL than the one written, and a host with a newline inside is a
/// typo or an attack, never a host.
pub(crate) fn url(s: &str) -> Result<Url, String> {
    if let Some((at, c)) = s.char_indices().find(|(_, c)| c.is_control()) {
        return Err(format!(
            "the URL holds a control character ({:?}) at byte {at}; remove it (spaces and \
             newlines are not part of a URL)",
            c
        ));
    }
    let mut url = Url::parse(s)
        .map_err(|e| format!("{e}; give an absolute URL such as http://127.0.0.1:8080/items"))?;
    match url.scheme() {
        "http" => {}
        "https" if cfg!(feature = "rustls") => {}
        "https" => {
            return Err(
                "this courier was built without HTTPS (its default feature `rustls` \
                        was left out); use http://, or build courier-cli with its default \
                        features"
                    .to_owned(),
            );
        }
        other => {
            return Err(format!(
                "scheme \"{}\" is not http or https",
                Excerpt::new(other)
            ));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL names no host".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "credentials in the URL are not sent; pass -H 'Authorization: ...' instead".to_owned(),
        );
    }
    url.set_fragment(None);
    // The URL crate accepts a few forms that `http::Uri` does not; refuse them here, not later.
    url.as_str()
        .parse::<http::Uri>()
        .map_err(|e| format!("{e}; the URL cannot be sent as a request target"))?;
    Ok(url)
}

/// A header written `Name: value`. The value may be empty; it may not hold control characters.
pub(crate) fn header(s: &str) -> Result<(HeaderName, HeaderValue), String> {
    let Some((name, value)) = s.split_once(':') else {
        return Err("write a header as 'Name: value'".to_owned());
    };
    header_parts(name, value)
}

/// A header from its name and value, checked as [`header`] checks them.
pub(crate) fn header_parts(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
        format!(
            "\"{}\" is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)",
            Excerpt::new(name.trim())
        )
    })?;
    if name == http::header::CONTENT_LENGTH || name == http::header::TRANSFER_ENCODING {
        return Err(format!("{name} is set from -d; leave it out of -H"));
    }
    let value = HeaderValue::from_str(value.trim_matches([' ', '\t'])).map_err(|_| {
        format!("the value of {name} holds a control character (below 0x20 but tab, or 0x7f)")
    })?;
    Ok((name, value))
}

/// A `User-Agent` for `-A`, without control characters; empty sends none, as curl's `-A ''`
/// does.
pub(crate) fn user_agent(s: &str) -> Result<HeaderValue, String> {
    HeaderValue::from_str(s).map_err(|_| {
        "a User-Agent may not hold a control character (below 0x20 but tab, or 0x7f)".to_owned()
    })
}

/// Requests in flight at once for `batch`: 1 to [`MAX_PARALLEL`].
pub(crate) fn parallel(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_PARALLEL).contains(&n) => Ok(n),
        _ => Err(format!(
            "want a whole number of requests in flight, 1 to {MAX_PARALLEL}"
        )),
    }
}

/// The most requests a batch keeps in flight: each holds a connection, and a process has a
/// limited number of open files.
pub(crate) const MAX_PARALLEL: usize = 256;

/// The extra trust anchors of `--cacert FILE`, read and checked before anything is sent.
#[cfg(feature = "rustls")]
#[derive(Debug, Clone)]
pub(crate) struct CaFile {
    /// The file, as given.
    pub(crate) path: std::path::PathBuf,
    /// The file's certificates.
    pub(crate) roots: Vec<courier::rustls::pki_types::CertificateDer<'static>>,
}

/// A PEM file of `--cert` or `--key`, read before anything is sent; checked with its pair by
/// [`ClientArgs::transport`](crate::client::ClientArgs::transport).
#[cfg(feature = "rustls")]
#[derive(Debug, Clone)]
pub(crate) struct PemFile {
    /// The file, as given.
    pub(crate) path: std::path::PathBuf,
    /// Its text.
    pub(crate) pem: Vec<u8>,
}

/// The largest PEM file read for `--cacert`, `--cert` or `--key`: a system's whole bundle of
/// roots is about 200 KiB.
#[cfg(feature = "rustls")]
pub(crate) const MAX_PEM_FILE: u64 = 4 << 20;

/// `--cacert FILE`: PEM certificates to trust besides the system's roots, at most
/// [`MAX_PEM_FILE`] bytes.
#[cfg(feature = "rustls")]
pub(crate) fn ca_file(s: &str) -> Result<CaFile, String> {
    let file = pem_file(s, "a PEM file of CA certificates")?;
    let roots = courier::transport::tls::pem_certificates(&file.pem)
        .map_err(|e| format!("{}: {e}", file.path.display()))?;
    Ok(CaFile {
        path: file.path,
        roots,
    })
}

/// `--cert FILE`: the client's certificate chain in PEM, at most [`MAX_PEM_FILE`] bytes.
#[cfg(feature = "rustls")]
pub(crate) fn cert_file(s: &str) -> Result<PemFile, String> {
    let file = pem_file(s, "a PEM file of the client's certificate")?;
    courier::transport::tls::pem_certificates(&file.pem)
        .map_err(|e| format!("{}: {e}", file.path.display()))?;
    Ok(file)
}

/// `--key FILE`: the private key of `--cert` in PEM, at most [`MAX_PEM_FILE`] bytes.
#[cfg(feature = "rustls")]
pub(crate) fn key_file(s: &str) -> Result<PemFile, String> {
    pem_file(s, "a PEM file of the client certificate's private key")
}

/// The file `s` names, at most [`MAX_PEM_FILE`] bytes; `wanted` says what to give instead.
#[cfg(feature = "rustls")]
fn pem_file(s: &str, wanted: &str) -> Result<PemFile, String> {
    use std::io::Read as _;
    let path = std::path::PathBuf::from(s);
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}; give {wanted}", path.display());
    let mut pem = Vec::new();
    std::fs::File::open(&path)
        .and_then(|file| file.take(MAX_PEM_FILE + 1).read_to_end(&mut pem))
        .map_err(cannot)?;
    if pem.len() as u64 > MAX_PEM_FILE {
        return Err(format!(
            "{} is larger than {} MiB, more than any PEM file of certificates or keys; give \
             {wanted}",
            path.display(),
            MAX_PEM_FILE >> 20
        ));
    }
    Ok(PemFile { path, pem })
}

/// An `Idempotency-Key` value: not blank, without control characters.
pub(crate) fn idempotency_key(s: &str) -> Result<HeaderValue, String> {
    if s.trim().is_empty() {
        return Err("a blank key identifies nothing; give a unique string".to_owned());
    }
    HeaderValue::from_str(s).map_err(|_| {
        "a key may not hold a control character (below 0x20 but tab, or 0x7f)".to_owned()
    })
}

fn seconds_at_least(s: &str, zero_ok: bool) -> Result<Duration, String> {
    let what = if zero_ok {
        "a number of seconds, 0 or more, such as 0.5 or 30"
    } else {
        "a number of seconds, 0.001 or more, such as 0.5 or 30"
    };
    let secs: f64 = s.trim().parse().map_err(|_| format!("want {what}"))?;
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("want {what}"));
    }
    let duration =
        Duration::try_from_secs_f64(secs).map_err(|_| format!("too large; want {what}"))?;
    // Below a millisecond a budget is spent before anything is sent (and rounds to 0 ns).
    if !zero_ok && duration < Duration::from_millis(1) {
        return Err(format!("too small; want {what}"));
    }
    Ok(duration)
}

/// Seconds, fractional allowed, at least a millisecond.
pub(crate) fn positive_seconds(s: &str) -> Result<Duration, String> {
    seconds_at_least(s, false)
}

/// Seconds, fractional allowed, zero or more.
pub(crate) fn seconds(s: &str) -> Result<Duration, String> {
    seconds_at_least(s, true)
}

/// Requests per second, fractional allowed.
pub(crate) fn rate(s: &str) -> Result<Rate, String> {
    let rps: f64 = s
        .trim()
        .parse()
        .map_err(|_| "want a number of requests per second, such as 5 or 0.5".to_owned())?;
    Rate::per_second(rps).map_err(|e| e.requirement().to_owned())
}

/// A retry count: a whole number, 0 or more, with room for the first attempt in a `u32`.
pub(crate) fn retries(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if n < u32::MAX => Ok(n),
        Ok(_) => Err(format!(
            "want at most {} retries (the first attempt makes {} in all)",
            u32::MAX - 1,
            u32::MAX
        )),
        Err(_) => Err("want a whole number of retries, 0 or more (0: one attempt only)".to_owned()),
    }
}

/// A burst: a whole number of requests, at least 1.
pub(crate) fn burst(s: &str) -> Result<NonZeroU32, String> {
    s.trim()
        .parse::<NonZeroU32>()
        .map_err(|_| "want a whole number of requests, at least 1".to_owned())
}

/// A size in bytes: a whole number, with an optional K, M or G (powers of 1024).
pub(crate) fn size(s: &str) -> Result<u64, String> {
    const WANT: &str = "want a size in bytes, such as 500000, 64K, 10M or 2G";
    let s = s.trim();
    let (digits, unit) = match s.char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => (&s[..at], c.to_ascii_uppercase()),
        _ => (s, 'B'),
    };
    let shift = match unit {
        'B' => 0,
        'K' => 10,
        'M' => 20,
        'G' => 30,
        _ => return Err(WANT.to_owned()),
    };
    let n: u64 = digits.parse().map_err(|_| WANT.to_owned())?;
    n.checked_mul(1 << shift)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{WANT}, at least 1 byte and at most 2^64"))
}

/// How many pages `paginate` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PageBound {
    /// `--max-pages` not given: [`crate::paginate::DEFAULT_MAX_PAGES`].
    Default,
    /// `--max-pages N`.
    At(u64),
    /// `--max-pages none`.
    Unbounded,
}

impl PageBound {
    /// The bound on pages, if any.
    pub(crate) fn pages(self) -> Option<u64> {
        match self {
            Self::Default => Some(crate::paginate::DEFAULT_MAX_PAGES),
            Self::At(n) => Some(n),
            Self::Unbounded => None,
        }
    }
}

/// `--max-pages`: a whole number of pages, at least 1, or `none`.
pub(crate) fn max_pages(s: &str) -> Result<PageBound, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("none") {
        return Ok(PageBound::Unbounded);
    }
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(PageBound::At(n)),
        _ => Err("want a whole number of pages, at least 1, or none for no bound".to_owned()),
    }
}

/// A JSON field name for `--cursor`; refuses what looks like the URL that should follow it.
pub(crate) fn field(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the cursor field name is empty".to_owned());
    }
    if s.contains("://") || s.contains('/') {
        return Err(format!(
            "\"{}\" looks like a URL, not a field name; put the URL before --cursor, \
             or write --cursor=FIELD",
            Excerpt::new(s)
        ));
    }
    Ok(s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The message clap prints for `value` refused by `parse`, if it is refused.
    fn refusal<T, F>(parse: F, value: &str) -> Option<String>
    where
        F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static,
        T: Clone + Send + Sync + 'static,
    {
        let mut cmd = clap::Command::new("courier").arg(clap::Arg::new("value").long("value"));
        cmd.build();
        let arg = cmd.get_arguments().next().expect("the argument");
        checked(parse)
            .parse_ref(&cmd, Some(arg), OsStr::new(value))
            .err()
            .map(|e| e.to_string())
    }

    proptest! {
        #[test]
        fn a_refusal_is_bounded_and_free_of_control_characters(
            value in prop_oneof![
                any::<String>(),
                "[ -~\r\n\t\u{0}-\u{1f}\u{85}\u{202e}]{0,3000}",
                "(http://)?[a-z\n\r:]{0,2000}",
            ],
        ) {
            let messages = [
                refusal(url, &value),
                refusal(header, &value),
                refusal(method, &value),
                refusal(field, &value),
                refusal(size, &value),
                refusal(max_pages, &value),
                refusal(idempotency_key, &value),
                refusal(user_agent, &value),
            ];
            for message in messages.into_iter().flatten() {
                let body = message.strip_suffix('\n').unwrap_or(&message);
                prop_assert!(!body.chars().any(char::is_control), "{message:?}");
                // Two excerpts at most (the value, and a part of it in the parser's own
                // words), each 200 characters escaped to at most 10 bytes, and the words.
                prop_assert!(message.len() <= 2 * 2_040 + 600, "{} bytes", message.len());
            }
        }
    }

    #[test]
    fn a_value_that_is_not_utf8_is_refused_in_hex() {
        use std::os::unix::ffi::OsStrExt as _;
        let cmd = clap::Command::new("courier");
        let err = checked(url)
            .parse_ref(&cmd, None, OsStr::from_bytes(b"http://h/\xff"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("http://h/\\xff"), "{err}");
        assert!(err.contains("not UTF-8"), "{err}");
    }

    #[test]
    fn seconds_refuse_what_is_not_a_duration() {
        for bad in [
            "-1", "nan", "NaN", "inf", "-inf", "1e400", "", "abc", "1s", "1e30",
        ] {
            assert!(seconds(bad).is_err(), "{bad:?}");
            assert!(positive_seconds(bad).is_err(), "{bad:?}");
        }
        assert_eq!(seconds("0"), Ok(Duration::ZERO));
        assert!(positive_seconds("0").is_err());
        assert!(positive_seconds("-0").is_err());
        assert_eq!(positive_seconds("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(positive_seconds("0.001"), Ok(Duration::from_millis(1)));
        for tiny in ["1e-10", "0.0000000001", "1e-300", "0.0009"] {
            assert!(positive_seconds(tiny).is_err(), "{tiny:?}");
        }
        assert_eq!(positive_seconds(" 2 "), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn headers_split_at_the_first_colon() {
        let (n, v) = header("X-Trace:  a:b ").unwrap();
        assert_eq!(n, "x-trace");
        assert_eq!(v, "a:b");
        let (_, v) = header("X-Empty:").unwrap();
        assert_eq!(v, "");
        for bad in [
            "no colon",
            ": v",
            "bad name: v",
            "X: a\nb",
            "X: a\rb",
            "Content-Length: 3",
        ] {
            assert!(header(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn urls_must_be_absolute_http_with_a_host() {
        assert!(url("http://127.0.0.1:8080/items?a=1#frag").is_ok_and(|u| u.fragment().is_none()));
        for bad in [
            "/items",
            "ftp://h/",
            "http://user:pw@h/",
            "not a url",
            "http://",
            "http://exa\nmple.com/",
            "http://example.com/\t",
            "http://exa\rmple.com/",
            "http://h\x00/",
            "\u{85}http://h/",
        ] {
            assert!(url(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn methods_are_upper_cased_tokens() {
        assert_eq!(method("get"), Ok(Method::GET));
        assert_eq!(method("PURGE").unwrap().as_str(), "PURGE");
        assert!(method("GE T").is_err());
        assert!(method("").is_err());
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(size("500000"), Ok(500_000));
        assert_eq!(size("64K"), Ok(64 << 10));
        assert_eq!(size("10m"), Ok(10 << 20));
        assert_eq!(size("2G"), Ok(2 << 30));
        for bad in ["", "0", "-1", "1T", "K", "1.5M", "99999999999999999999G"] {
            assert!(size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rates_and_bursts() {
        assert!(rate("0").is_err());
        assert!(rate("-1").is_err());
        assert!(rate("nan").is_err());
        assert!(rate("0.5").is_ok());
        assert!(retries("-1").is_err());
        assert_eq!(retries("0"), Ok(0));
        assert!(burst("0").is_err());
        assert!(burst("-3").is_err());
        assert_eq!(burst("4").map(NonZeroU32::get), Ok(4));
    }

    #[test]
    fn cursor_fields_are_not_urls() {
        assert_eq!(field("next").as_deref(), Ok("next"));
        assert!(field("http://127.0.0.1/cursor").is_err());
        assert!(field("").is_err());
    }

    #[test]
    fn keys_are_not_blank() {
        assert!(idempotency_key("  ").is_err());
        assert!(idempotency_key("k\n").is_err());
        assert!(idempotency_key("order-7f3a").is_ok());
    }
}
