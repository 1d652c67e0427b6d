//! Pagination as a `Stream` of pages, every page sent through the whole stack.
//!
//! The server owns pagination: a client follows what it is given and never computes page
//! numbers. Two shapes are common:
//!
//! - [`links`]: RFC 8288 `Link: <...>; rel="next"` headers (GitHub and most REST APIs). The stream
//!   follows `rel="next"` until there is none, refuses a `next` it has already visited, and stops
//!   at a maximum number of pages. It refuses, too, a `next` on another origin (scheme, host and
//!   port) than the first page's, since the stack would send the caller's credentials there;
//!   [`allow_cross_origin`](Pages::allow_cross_origin) follows it for a server the caller trusts.
//! - [`cursor`]: a JSON body field (`next_cursor` by default) passed back as a query parameter
//!   (`cursor` by default). The cursor is opaque: it is never decoded, only echoed. The first page
//!   is fetched from the start URL as given, cursor included; later pages replace that one query
//!   parameter and leave the rest of the query as it was written.
//!
//! Both are one type, [`Pages`], walked two ways. Each exposes its position (`position()`, a
//! [`LinkPosition`] or a [`CursorPosition`]), which serializes with serde and can be handed back
//! to `LinkPages::resume` or `CursorPages::resume` to continue where a crashed run stopped.
//!
//! A stream ends after its first failure: an error (the stack below has already retried what
//! could be retried), or a page whose status is not 2xx, which is yielded as it came. The
//! position then still names the page that failed, so resuming asks for it again rather than
//! taking an incomplete listing for a finished one.
//!
//! A refused `next` (a loop, or another origin) ends the stream the same way: the page that
//! named it is yielded first, then [`Error::Pagination`], then nothing. The position is not
//! finished: a [`LinkPosition`] keeps the refused URL as `next` (resuming refuses it again
//! without a request, unless cross-origin links are then allowed), and a [`CursorPosition`] keeps
//! `done` false and the looping cursor as `cursor`.
//!
//! ```no_run
//! # async fn run() -> Result<(), courier::Error> {
//! use futures_util::TryStreamExt;
//!
//! let client = courier::transport::hyper_client::<http_body_util::Empty<bytes::Bytes>>();
//! let start = url::Url::parse("http://127.0.0.1:8080/items?per_page=10").unwrap();
//! let mut pages = courier::paginate::links(client, start).max_pages(100);
//! while let Some(page) = pages.try_next().await? {
//!     for item in page.json_items(None)? {
//!         println!("{item}");
//!     }
//! }
//! # Ok(()) }
//! ```

pub mod link;
mod seen;

pub use seen::Seen;

use crate::Error;
use bytes::Bytes;
use courier_core::excerpt::Excerpt;
use courier_core::{Attempts, BoxError};
use futures_core::Stream;
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use link::{next_link, parse_link_headers};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower::ServiceExt;
use tower_service::Service;
use url::{Position, Url};

/// Why a pagination stream stopped, other than a failed call (that is the call's own
/// [`Error`]). Each variant names the page or link at fault.
#[derive(Debug)]
#[non_exhaustive]
pub enum PaginationError {
    /// A page's body is not JSON.
    NotJson {
        /// The page.
        url: String,
        /// The JSON parser's complaint.
        source: serde_json::Error,
    },
    /// A page's JSON holds no array at the top, or under `field`.
    NoArray {
        /// The page.
        url: String,
        /// The field the items were looked for under, if any.
        field: Option<String>,
    },
    /// A link or a cursor made a URL that is not a valid request URI.
    InvalidUri {
        /// The URL.
        url: String,
        /// Why `http` refused it.
        source: http::uri::InvalidUri,
    },
    /// The request for a page could not be built.
    Request(http::Error),
    /// A page links back to a page of this run: following it would loop.
    LinkLoop {
        /// The page holding the link.
        from: String,
        /// The page it links back to.
        to: String,
    },
    /// A page links to another origin, which is not followed unless allowed, so that the
    /// stack's credentials stay with their origin.
    CrossOrigin {
        /// The page holding the link.
        from: String,
        /// The link.
        to: String,
        /// The listing's origin.
        origin: String,
    },
    /// The server handed out a cursor it had handed out before.
    CursorLoop {
        /// The cursor seen twice.
        cursor: String,
    },
}

impl fmt::Display for PaginationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs and cursors come from the server: quoted bounded, their controls escaped.
        let q = |s: &str| Excerpt::new(s).to_string();
        match self {
            Self::NotJson { url, source } => write!(f, "page {} is not JSON: {source}", q(url)),
            Self::NoArray { url, field: None } => write!(f, "page {} holds no array", q(url)),
            Self::NoArray {
                url,
                field: Some(field),
            } => write!(f, "page {} holds no array under \"{}\"", q(url), q(field)),
            Self::InvalidUri { url, source } => {
                write!(f, "{} is not a valid request URI: {source}", q(url))
            }
            Self::Request(source) => write!(f, "the page's request cannot be built: {source}"),
            Self::LinkLoop { from, to } => {
                write!(
                    f,
                    "{} links back to {}, which was already visited",
                    q(from),
                    q(to)
                )
            }
            Self::CrossOrigin { from, to, origin } => write!(
                f,
                "{} links to {}, off the listing's origin {}; it is not followed, so \
                 that the stack's credentials stay with their origin: allow cross-origin links \
                 (`allow_cross_origin(true)`, or `courier paginate --allow-cross-origin`) to \
                 follow it if that server is trusted",
                q(from),
                q(to),
                q(origin)
            ),
            Self::CursorLoop { cursor } => {
                write!(
                    f,
                    "cursor \"{}\" was already used; the server is looping",
                    q(cursor)
                )
            }
        }
    }
}

impl std::error::Error for PaginationError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NotJson { source, .. } => Some(source),
            Self::InvalidUri { source, .. } => Some(source),
            Self::Request(source) => Some(source),
            _ => None,
        }
    }
}

/// One page: where it came from, its status and headers, and its whole body.
#[derive(Debug, Clone)]
pub struct Page {
    url: Url,
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    attempts: Option<Attempts>,
}

impl Page {
    /// The URL the page was fetched from.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The page's status. A stream ends after the first page whose status is not 2xx.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The page's headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The page's body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The attempt records the retry layer left on the page's response, if it ran.
    pub fn attempts(&self) -> Option<&Attempts> {
        self.attempts.as_ref()
    }

    /// The page's items: the body's top-level JSON array, or the array under `field`.
    ///
    /// # Errors
    ///
    /// [`Error::Pagination`] when the body is not JSON or holds no such array.
    pub fn json_items(&self, field: Option<&str>) -> Result<Vec<serde_json::Value>, Error> {
        let value: serde_json::Value = serde_json::from_slice(&self.body).map_err(|source| {
            Error::Pagination(PaginationError::NotJson {
                url: self.url.to_string(),
                source,
            })
        })?;
        let value = match field {
            Some(f) => value.get(f).cloned().unwrap_or(serde_json::Value::Null),
            None => value,
        };
        match value {
            serde_json::Value::Array(items) => Ok(items),
            _ => Err(Error::Pagination(PaginationError::NoArray {
                url: self.url.to_string(),
                field: field.map(str::to_owned),
            })),
        }
    }
}

/// Where a [`LinkPages`] stream stands: the next URL to fetch, the pages read so far (the most
/// recent of them remembered), and the first.
///
/// It serializes as `{"next": ..., "visited": [...]}`, the pages oldest first, as earlier
/// releases wrote it; `first` and `pages` are written too only when `visited` no longer tells
/// them (past [`Seen::CAPACITY`] pages), and a position without them reads them from `visited`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPosition {
    /// The next page to fetch (the failed one, after a failure); `None` once the last page was
    /// read.
    pub next: Option<Url>,
    /// The most recent pages read, without their fragments (at most [`Seen::CAPACITY`]): a
    /// `next` among them is a loop.
    pub visited: Seen,
    /// The first page read: the listing keeps to its origin.
    pub first: Option<Url>,
    /// Pages read so far.
    pub pages: u64,
}

/// [`LinkPosition`] as it is written.
#[derive(Serialize, Deserialize)]
struct SavedLinkPosition {
    next: Option<Url>,
    #[serde(default)]
    visited: Vec<Url>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    first: Option<Url>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pages: Option<u64>,
}

impl Serialize for LinkPosition {
    fn serialize<Ser: serde::Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        let visited = self
            .visited
            .iter()
            .map(Url::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(serde::ser::Error::custom)?;
        let told_by_visited = self.pages == visited.len() as u64
            && self.first.as_ref().map(page_key) == visited.first().map(page_key);
        SavedLinkPosition {
            next: self.next.clone(),
            visited,
            first: self.first.clone().filter(|_| !told_by_visited),
            pages: (!told_by_visited).then_some(self.pages),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for LinkPosition {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let saved = SavedLinkPosition::deserialize(deserializer)?;
        let mut visited = Seen::default();
        for url in &saved.visited {
            visited.insert(page_key(url));
        }
        Ok(Self {
            first: saved.first.or_else(|| saved.visited.first().cloned()),
            pages: saved.pages.unwrap_or(saved.visited.len() as u64),
            next: saved.next,
            visited,
        })
    }
}

/// Where a [`CursorPages`] stream stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorPosition {
    /// The URL every page is fetched from, with the cursor parameter set on it.
    pub url: Url,
    /// The cursor for the next page: `None` before the first page, which is fetched from `url`
    /// as given (with any cursor the caller put in it).
    pub cursor: Option<String>,
    /// Pages read so far (a failed page does not count).
    pub pages: u64,
    /// Whether the last page had no next cursor. A listing whose server looped is not done.
    pub done: bool,
    /// The most recent cursors used (at most [`Seen::CAPACITY`]), to refuse a loop.
    pub seen: Seen,
}

/// Follows `Link: rel="next"` from `start` through `service`, on `start`'s origin only unless
/// [`allow_cross_origin`](Pages::allow_cross_origin) says otherwise.
pub fn links<S, B>(service: S, start: Url) -> LinkPages<S, B> {
    LinkPages::resume(
        service,
        LinkPosition {
            next: Some(start),
            visited: Seen::default(),
            first: None,
            pages: 0,
        },
    )
}

/// Follows a JSON cursor from `start` through `service`: the cursor is read from the body's
/// `next_cursor` field and sent back as the `cursor` query parameter (both configurable). A
/// cursor already in `start` is sent with the first request.
pub fn cursor<S, B>(service: S, start: Url) -> CursorPages<S, B> {
    CursorPages::resume(
        service,
        CursorPosition {
            url: start,
            cursor: None,
            pages: 0,
            done: false,
            seen: Seen::default(),
        },
    )
}

type PageFuture = Pin<Box<dyn Future<Output = Result<Page, Error>> + Send>>;

fn fetch<S, B, RB>(service: S, url: Url) -> PageFuture
where
    S: Service<http::Request<B>, Response = http::Response<RB>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Default + Send + 'static,
    RB: http_body::Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    Box::pin(async move {
        let uri: http::Uri = url.as_str().parse().map_err(|source| {
            Error::Pagination(PaginationError::InvalidUri {
                url: url.to_string(),
                source,
            })
        })?;
        let req = http::Request::get(uri)
            .body(B::default())
            .map_err(|source| Error::Pagination(PaginationError::Request(source)))?;
        let resp = service
            .oneshot(req)
            .await
            .map_err(|e| Error::from(e.into()))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| Error::from(e.into()))?
            .to_bytes();
        Ok(Page {
            url,
            status: parts.status,
            attempts: parts.extensions.get::<Attempts>().cloned(),
            headers: parts.headers,
            body,
        })
    })
}

mod sealed {
    use super::{Error, Page, Url};

    /// What a stream of pages knows about where it stands, and how a page moves it on.
    pub trait Walk {
        /// The next page to fetch; `None` when the listing has been read, an error when the next
        /// page is refused (a loop, or another origin while `cross_origin` is false).
        fn next_url(&self, cross_origin: bool) -> Result<Option<Url>, Error>;
        /// Pages read so far.
        fn pages_read(&self) -> u64;
        /// Moves on past a page read with a 2xx status; an error ends the stream without the
        /// page.
        fn advance(&mut self, page: &Page) -> Result<(), Error>;
    }
}

/// How a [`Pages`] stream gets from one page to the next: [`LinkPosition`] follows
/// `Link: rel="next"` headers, [`CursorWalk`] an opaque cursor in the body.
///
/// The trait is sealed: only this module implements it.
pub trait Walk: sealed::Walk {}

impl Walk for LinkPosition {}

impl Walk for CursorWalk {}

/// A stream of pages, one fetch in flight at a time, each through the whole stack.
///
/// Use it through its two shapes: [`LinkPages`] (made by [`links`]) and [`CursorPages`] (made by
/// [`cursor`]). It ends after a page whose status is not 2xx, after an error, after a refused
/// next page (a loop, or a link to another origin), at [`max_pages`](Pages::max_pages), or when
/// the listing has been read; its position still names a failed or refused page, so resuming
/// asks for it again.
#[must_use = "streams do nothing unless polled"]
pub struct Pages<S, B, W> {
    service: S,
    walk: W,
    max_pages: Option<u64>,
    cross_origin: bool,
    in_flight: Option<PageFuture>,
    ended: bool,
    _body: PhantomData<fn() -> B>,
}

/// A stream of pages linked by `rel="next"`. Made by [`links`]; continued from a saved
/// [`LinkPosition`] by `LinkPages::resume`.
pub type LinkPages<S, B> = Pages<S, B, LinkPosition>;

/// A stream of pages linked by an opaque cursor. Made by [`cursor`]; continued from a saved
/// [`CursorPosition`] by `CursorPages::resume`.
pub type CursorPages<S, B> = Pages<S, B, CursorWalk>;

// === impl Pages ===

impl<S, B, W> Pages<S, B, W> {
    fn new(service: S, walk: W) -> Self {
        Self {
            service,
            walk,
            max_pages: None,
            cross_origin: false,
            in_flight: None,
            ended: false,
            _body: PhantomData,
        }
    }

    /// Stops after `n` pages in all (counting pages read before a resume). Defaults to no
    /// limit.
    pub fn max_pages(mut self, n: u64) -> Self {
        self.max_pages = Some(n);
        self
    }
}

impl<S, B> Pages<S, B, LinkPosition> {
    /// Continues from a saved position.
    ///
    /// The listing's origin is that of `first`, or of `next` when no page was read yet.
    pub fn resume(service: S, position: LinkPosition) -> Self {
        Self::new(service, position)
    }

    /// Whether to follow a `rel="next"` link to another origin (scheme, host or port) than the
    /// listing's first page. Refused, such a link ends the stream with [`Error::Pagination`]
    /// after the page that named it, before any request is sent there: the stack's credentials
    /// (an `Authorization` header a layer adds) would go with it. Allow it only for a server
    /// trusted to name the hosts your credentials go to. Defaults to `false`.
    pub fn allow_cross_origin(mut self, allow: bool) -> Self {
        self.cross_origin = allow;
        self
    }

    /// Where the stream stands; save it to resume later.
    pub fn position(&self) -> &LinkPosition {
        &self.walk
    }
}

impl<S, B> Pages<S, B, CursorWalk> {
    /// Continues from a saved position.
    pub fn resume(service: S, position: CursorPosition) -> Self {
        let walk = CursorWalk {
            position,
            field: "next_cursor".to_owned(),
            param: "cursor".to_owned(),
            looped: None,
        };
        Self::new(service, walk)
    }

    /// The body field holding the next cursor. Defaults to `next_cursor`.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.walk.field = field.into();
        self
    }

    /// The query parameter the cursor is sent back in. Defaults to `cursor`.
    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.walk.param = param.into();
        self
    }

    /// Where the stream stands; save it to resume later.
    pub fn position(&self) -> &CursorPosition {
        &self.walk.position
    }
}

impl<S, B, W: fmt::Debug> fmt::Debug for Pages<S, B, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pages")
            .field("walk", &self.walk)
            .field("max_pages", &self.max_pages)
            .field("cross_origin", &self.cross_origin)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl<S, B, W> Unpin for Pages<S, B, W> {}

impl<S, B, W, RB> Stream for Pages<S, B, W>
where
    S: Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Default + Send + 'static,
    W: Walk,
    RB: http_body::Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError>,
{
    type Item = Result<Page, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if this.in_flight.is_none() {
            if this
                .max_pages
                .is_some_and(|max| this.walk.pages_read() >= max)
            {
                return Poll::Ready(None);
            }
            let url = match this.walk.next_url(this.cross_origin) {
                Ok(Some(url)) => url,
                Ok(None) => return Poll::Ready(None),
                Err(e) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(e)));
                }
            };
            this.in_flight = Some(fetch(this.service.clone(), url));
        }
        let fut = this.in_flight.as_mut().expect("a fetch is in flight");
        let result = ready!(fut.as_mut().poll(cx));
        this.in_flight = None;
        let page = match result {
            Ok(page) => page,
            Err(e) => {
                this.ended = true;
                return Poll::Ready(Some(Err(e)));
            }
        };
        if !page.status.is_success() {
            this.ended = true;
            return Poll::Ready(Some(Ok(page)));
        }
        if let Err(e) = this.walk.advance(&page) {
            this.ended = true;
            return Poll::Ready(Some(Err(e)));
        }
        Poll::Ready(Some(Ok(page)))
    }
}

// === impl LinkPosition ===

impl sealed::Walk for LinkPosition {
    fn next_url(&self, cross_origin: bool) -> Result<Option<Url>, Error> {
        let Some(next) = &self.next else {
            return Ok(None);
        };
        // Both refusals need a page read: the first page of a run is the caller's to choose.
        let (Some(first), Some(last)) = (&self.first, self.visited.newest()) else {
            return Ok(Some(next.clone()));
        };
        if self.visited.contains(page_key(next)) {
            return Err(Error::Pagination(PaginationError::LinkLoop {
                from: last.to_string(),
                to: next.to_string(),
            }));
        }
        let (origin, other) = (first.origin(), next.origin());
        if !cross_origin && origin != other {
            return Err(Error::Pagination(PaginationError::CrossOrigin {
                from: last.to_string(),
                to: next.to_string(),
                origin: origin.ascii_serialization(),
            }));
        }
        Ok(Some(next.clone()))
    }

    fn pages_read(&self) -> u64 {
        self.pages
    }

    fn advance(&mut self, page: &Page) -> Result<(), Error> {
        self.visited.insert(page_key(&page.url));
        if self.first.is_none() {
            self.first = Some(page.url.clone());
        }
        self.pages += 1;
        let links = parse_link_headers(&page.headers, &page.url);
        // A loop or another origin is refused by `next_url`, after this page is yielded.
        self.next = next_link(&links).cloned();
        Ok(())
    }
}

/// The page `url` names: a fragment is never sent, so `/p#top` is the page `/p`.
fn page_key(url: &Url) -> &str {
    &url[..Position::AfterQuery]
}

/// How a [`CursorPages`] stream walks: its [`CursorPosition`], the body field the next cursor is
/// read from and the query parameter it is sent back in. Set them with
/// [`field`](Pages::field) and [`param`](Pages::param); read the position with
/// `CursorPages::position`.
#[derive(Debug)]
pub struct CursorWalk {
    position: CursorPosition,
    field: String,
    param: String,
    /// The cursor the last page looped back to; `next_url` reports the loop in place of a fetch.
    looped: Option<String>,
}

// === impl CursorWalk ===

impl CursorWalk {
    /// The value of the cursor parameter in `url`'s query, if it has one.
    fn cursor_in(&self, url: &Url) -> Option<String> {
        url.query_pairs()
            .find(|(k, _)| *k == self.param)
            .map(|(_, v)| v.into_owned())
    }
}

impl sealed::Walk for CursorWalk {
    fn next_url(&self, _cross_origin: bool) -> Result<Option<Url>, Error> {
        if let Some(c) = &self.looped {
            return Err(Error::Pagination(PaginationError::CursorLoop {
                cursor: c.clone(),
            }));
        }
        if self.position.done {
            return Ok(None);
        }
        let mut url = self.position.url.clone();
        let Some(cursor) = &self.position.cursor else {
            // The first page: the start URL as the caller wrote it, cursor included.
            return Ok(Some(url));
        };
        // Only the cursor pair changes: the rest of the query keeps its exact text.
        let mut query: String = url
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|pair| {
                !pair.is_empty()
                    && url::form_urlencoded::parse(pair.as_bytes())
                        .next()
                        .is_none_or(|(k, _)| k != self.param)
            })
            .flat_map(|pair| [pair, "&"])
            .collect();
        query.extend(url::form_urlencoded::byte_serialize(self.param.as_bytes()));
        query.push('=');
        query.extend(url::form_urlencoded::byte_serialize(cursor.as_bytes()));
        url.set_query(Some(&query));
        Ok(Some(url))
    }

    fn pages_read(&self) -> u64 {
        self.position.pages
    }

    fn advance(&mut self, page: &Page) -> Result<(), Error> {
        let body: serde_json::Value = serde_json::from_slice(&page.body).map_err(|source| {
            Error::Pagination(PaginationError::NotJson {
                url: page.url.to_string(),
                source,
            })
        })?;
        let next = match body.get(&self.field) {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) if s.is_empty() => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            // Numbers and other scalars are echoed as their JSON text, never interpreted.
            Some(other) => Some(other.to_string()),
        };
        let start = match self.position.cursor {
            None => self.cursor_in(&self.position.url),
            Some(_) => None,
        };
        let position = &mut self.position;
        position.pages += 1;
        let Some(c) = next else {
            position.done = true;
            return Ok(());
        };
        // The cursor that fetched this page counts as used: on the first page, the start URL's.
        if let Some(prev) = position.cursor.take().or(start) {
            position.seen.insert(&prev);
        }
        if position.seen.contains(&c) {
            // The page is yielded; the loop is reported in place of the next fetch, and the
            // position is left unfinished, naming the cursor the server looped back to.
            self.looped = Some(c.clone());
        } else {
            position.seen.insert(&c);
        }
        position.cursor = Some(c);
        Ok(())
    }
}
