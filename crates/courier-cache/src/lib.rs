//! `EtagCacheLayer`: ask "has it changed?" instead of "send it again".
//!
//! A private HTTP cache (RFC 9111; a shared one when so configured, see **Shared** below) for a
//! client: GET responses that carry an `ETag` and/or `Last-Modified`, or a freshness lifetime,
//! are kept in a bounded store, in memory or on disk. A fresh entry is served without a
//! request; a stale one is revalidated with `If-None-Match` / `If-Modified-Since` (in the
//! background, within `stale-while-revalidate`), and the server's `304 Not Modified` is
//! answered with the stored body. Concurrent requests for one key go upstream once. Many APIs
//! (GitHub's among them) do not count a 304 against the rate limit, so a poller spends quota
//! only on what changed.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use bytes::Bytes;
//! use courier_cache::EtagCacheLayer;
//! use courier_core::CacheStatus;
//! use http_body_util::{BodyExt, Full};
//! use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
//!
//! let upstream = service_fn(|req: http::Request<()>| async move {
//!     let response = if req.headers().get("if-none-match").is_some_and(|v| v == "\"v1\"") {
//!         http::Response::builder().status(304).header("etag", "\"v1\"").body(Full::default())
//!     } else {
//!         http::Response::builder().header("etag", "\"v1\"").body(Full::new(Bytes::from("hello")))
//!     };
//!     Ok::<_, std::convert::Infallible>(response.unwrap())
//! });
//! let mut client = ServiceBuilder::new().layer(EtagCacheLayer::new()).service(upstream);
//!
//! let get = || http::Request::get("http://api.example/thing").body(()).unwrap();
//! let first = client.ready().await.unwrap().call(get()).await.unwrap();
//! assert_eq!(first.extensions().get(), Some(&CacheStatus::Miss));
//! first.into_body().collect().await.unwrap(); // stored once the body has been read
//!
//! let second = client.ready().await.unwrap().call(get()).await.unwrap();
//! assert_eq!(second.status(), 200);
//! assert_eq!(second.extensions().get(), Some(&CacheStatus::Revalidated));
//! assert_eq!(second.into_body().collect().await.unwrap().to_bytes(), "hello");
//! # }
//! ```
//!
//! # What is stored
//!
//! - GET responses with a status in [`EtagCacheLayer::statuses`] (200 by default) that carry a
//!   validator (`ETag`, `Last-Modified`) or a freshness lifetime (`max-age`, `Expires`; for
//!   a request the cache is shared for, `s-maxage` first: see below).
//! - Only bodies whose size is known (`Content-Length`, or the body's size hint) and within
//!   [`EtagCacheLayer::max_entry_bytes`] (1 MiB by default). Larger bodies and bodies of unknown
//!   length stream through untouched. A stored body is copied into the store as it streams to
//!   the caller and stored when it ends; a body that fails, is dropped before its end (and not
//!   read on by requests waiting for it, see **Concurrency**), or ends shorter or longer than
//!   its exact announced length (`Content-Length`, or an exact size hint), is never stored.
//! - Not stored: request or response `no-store` (a response `no-store` also removes the URI's
//!   entries), `Vary: *`, requests with `Range`. `private` responses are stored (this is a
//!   private cache), unless [`EtagCacheLayer::credential_headers`] is empty, which makes the
//!   cache shared between all callers. A response to a request whose `Authorization` is not
//!   fingerprinted (so that callers with other credentials would share it) is stored only with
//!   `public`, `s-maxage` or `must-revalidate`, and never when `private` (RFC 9111 section 3.5).
//! - Entries are kept per URI: scheme and host compared without case, the scheme's default
//!   port (80 for `http`, 443 for `https`) the same as none (RFC 9110 section 4.2.3), path and
//!   query exactly; an unsafe method's invalidation uses the same key.
//! - Entries are selected per URI by `Vary` (one variant per combination of the listed request
//!   fields, compared as bytes) and by a fingerprint of the credentials (`Authorization` and `Cookie` by default,
//!   see [`EtagCacheLayer::credential_headers`]), so different credentials never share an
//!   entry. Eight variants per URI at most; the oldest goes first, as it does when the
//!   variants of a URI together would outweigh what the in-memory store takes as one value
//!   (nine tenths of one of its shards: the store is split into up to 16 shards of at least
//!   4 MiB each, or kept whole below 8 MiB).
//!
//! # When it is served
//!
//! - **Hit**: fresh by `max-age`, or by `Expires` minus `Date` (the server's clock), aged by
//!   RFC 9111 section 4.2.3 (`Age`, the apparent age and the time spent in the store, on tokio's
//!   clock). Responses without explicit freshness are always revalidated (no heuristic
//!   freshness). A request `no-cache` or `max-age=0`, a response `no-cache`, or
//!   [`EtagCacheLayer::always_revalidate`] force a revalidation. HEAD is answered from a stored
//!   GET.
//! - **Shared**: for a request the cache is shared for (every request when
//!   [`EtagCacheLayer::credential_headers`] is empty; a request whose `Authorization` is not
//!   fingerprinted), it reads the directives meant for shared caches (RFC 9111 sections
//!   5.2.2.8 and 5.2.2.10): `s-maxage` is the freshness lifetime, over `max-age` and
//!   `Expires`, and `s-maxage` and `proxy-revalidate` forbid serving the entry stale, as
//!   `must-revalidate` does. For other requests it is a private cache and ignores both.
//! - **Revalidated**: the cache adds `If-None-Match` and `If-Modified-Since` from the stored
//!   validators. A 304 whose validators select the stored entry (RFC 9111 section 4.3.4: a
//!   strong tag must match strongly, a weak one weakly, else `Last-Modified` must be equal; a
//!   304 without any validator selects the one entry that was nominated) is answered with the
//!   stored status and body and the stored headers updated from the 304 (section 3.2: each of
//!   its fields replaces the stored one, `Content-Length` and hop-by-hop fields excepted; a 304
//!   without `Date` is aged from when it arrived, not by the stored `Date`), and
//!   the entry is updated, if it is still stored (one invalidated or replaced while the
//!   revalidation was in flight stays gone). Entity tags are compared on their bytes, obs-text
//!   included; an unquoted one is weak (see **Unquoted entity tags** below). A 304 that
//!   selects nothing updates nothing, and the stored body is not the
//!   representation it speaks of; nor is the 304 an answer to a caller who asked no
//!   conditional question. The cache sends the GET or HEAD once more, without the validators
//!   it added (with a copy of its body, see [`EtagCache`], and the caller's extensions, its
//!   [`CallContext`](courier_core::CallContext) with its deadline among them, so that the layers below bound it as
//!   they bound the first), and answers with that, marked `Miss`; a 304 to that one is passed
//!   through. Only a request whose body gives a copy to keep aside (any `Clone` body, an empty
//!   `ReplayBody`) is made conditional; others are sent as they are. Callers waiting
//!   on the revalidation (see **Concurrency**) ask on their own.
//! - When the caller set conditionals itself, the cache adds none and the server's 304 is passed
//!   through untouched.
//! - **Stale**: on a transport error or a 5xx, an entry within its `stale-if-error` window (or
//!   [`EtagCacheLayer::stale_if_error`]) is served, so reads keep working while the upstream is
//!   down or its circuit is open; never one that says `must-revalidate` or `no-cache`, or,
//!   where the cache is shared, `proxy-revalidate` or `s-maxage` (RFC 9111 section 4.2.4).
//! - **Stale while revalidating**: an entry within its `stale-while-revalidate` window (RFC
//!   5861), and allowed stale as above, answers at once, marked `Stale` (with its `Age`), and
//!   the request, made conditional as for a revalidation, goes on in a tokio task of its own
//!   (see [`EtagCache`]'s **Bounds**). One such revalidation per stored entry at a time: the
//!   calls that come meanwhile are answered stale too. It carries a deadline ([`CallContext`](courier_core::CallContext)) of
//!   [`BACKGROUND_REVALIDATION_TIMEOUT`] (10 s) in place of the caller's, so that the layers
//!   below bound it as they bound any call, and is dropped by then whatever they do. Its answer
//!   updates or replaces the entry as a caller's would; its failure leaves the entry as it
//!   was. A request `no-cache` or `max-age` the entry is older than, and
//!   [`EtagCacheLayer::always_revalidate`], wait for the revalidation instead.
//! - A 2xx or 3xx answer to an unsafe method (any method but GET, HEAD, OPTIONS and TRACE,
//!   extension methods included) removes the URI's entries (and those of its `Location` /
//!   `Content-Location` on the same host).
//!
//! Every response carries a [`CacheStatus`](courier_core::CacheStatus) extension: `Hit`,
//! `Revalidated`, `Miss`, `Stale` or `Bypass` (methods and requests the cache does not handle).
//! Served entries carry an `Age` field.
//!
//! A GET or HEAD whose [`CallOptions::no_cache`](courier_core::CallOptions::no_cache) is set
//! passes through as one the cache does not handle (`Bypass`).
//!
//! # Attempts
//!
//! A response the cache builds without an answer from below for this call carries an empty
//! [`Attempts`](courier_core::Attempts) extension (`count() == 0`), with the cache status saying
//! why: a `Hit` (nothing was sent), a `Revalidated` or a `Miss` answered by another caller's
//! request (see **Concurrency**: this call sent nothing), a `Stale` within
//! `stale-while-revalidate` (the revalidation goes on in the background), or a `Stale` served
//! because the call failed with an error (an error carries no attempt records: it may be a
//! refusal that sent nothing, such as an open circuit, or the last of several failed
//! attempts). A response built from an answer from below keeps that answer's extensions, and
//! so the `Attempts` the retry layer below put there: a `Revalidated` from this call's 304 (every attempt, a retried 503 before it
//! included), a `Stale` served in place of a 5xx (every attempt, the last one the 5xx).
//! Responses passed on (`Miss`, `Bypass`) are the layers' below as they came. With a retry
//! layer below the cache, as in courier's preset, every response therefore carries `Attempts`,
//! and code that reads it needs no case for cached answers.
//!
//! # Unquoted entity tags
//!
//! RFC 9110 section 8.8.3 quotes every entity tag:
//!
//! ```text
//! entity-tag = [ weak ] opaque-tag
//! weak       = %s"W/"
//! opaque-tag = DQUOTE *etagc DQUOTE
//! etagc      = %x21 / %x23-7E / obs-text
//! ```
//!
//! Servers in the wild send it bare all the same (`ETag: abc`, as httpbin's `/etag/{etag}`
//! does) and answer `304` to `If-None-Match: abc`. The cache keeps such a value as a validator,
//! as curl and browsers do, instead of never revalidating:
//!
//! - It is sent back verbatim in `If-None-Match` (the stored field as it came): that is what the
//!   server compares against, whatever it makes of quotes.
//! - It is weak, and compared weakly only: a 304 selects the entry with the same unquoted tag
//!   (its bytes, without the whitespace around them) or with no validator at all. The
//!   opaque-tag of `"abc"` holds its quotes, so `"abc"` and `W/"abc"` are other tags, and so is
//!   `W/abc` (the `W/` of an unquoted value is part of it). Never used for strong comparison, it
//!   cannot make a `Range` or a strong `If-Match` answer wrong (the cache sends no `If-Match` or
//!   `If-Range` of its own, and a request with `Range` bypasses it).
//! - What counts: once the whitespace (SP, HTAB) around it is trimmed, one or more visible
//!   ASCII characters (`%x21-7E`) other than DQUOTE and comma, and not `*` alone
//!   ([`EntityTagRef::parse_lenient`](courier_core::cache_control::EntityTagRef::parse_lenient)).
//!   Anything else is still no validator: an empty value, a control character, whitespace or
//!   obs-text inside, a DQUOTE anywhere (a broken quoted tag, `"abc` or `a"b`), a list (`a, b`:
//!   no one tag to send back) and `*` (sent back, it would match any representation and turn
//!   every revalidation into a 304). Such a field is stored and served with the response, never
//!   sent; a `Last-Modified` still validates.
//!
//! # Stores
//!
//! The default [`MemoryStore`] holds at most 64 MiB (bodies, headers and a fixed overhead per
//! entry), evicting by S3-FIFO. It is the default because a hit then costs no I/O and no
//! allocation: the cache reads and writes it in place, and bodies are `Bytes`, so a hit hands
//! out the stored buffer without copying it. [`CacheStore`] is the seam for a store that waits
//! (on a disk, on the network): its reads and writes return futures, and its docs say how the
//! cache drives them. [`DiskStore`] keeps entries in files across restarts, within a bound in
//! bytes, and serves none whose file fails its checks.
//!
//! There is no store shared by replicas over the network: it would put a round trip in front
//! of every local miss to save a revalidation that costs about as much whenever the origin is
//! as near as the store (BENCHMARKS.md, "The cache behind an async store").
//!
//! # Errors
//!
//! The cache adds no failure of its own: errors are the inner service's, passed through (or
//! answered by a stale entry, as above).
//!
//! # Concurrency
//!
//! Concurrent revalidations of one stored entry, and concurrent GETs of one key that has no
//! entry to serve them, collapse into one upstream request ([`EtagCacheLayer::single_flight`],
//! on by default): the first goes upstream and the others wait for its result, so that a crowd
//! that starts together (a deployment warming up, a fan-out asking for one configuration)
//! reaches the server once.
//!
//! - A revalidation's waiters are answered from the entry its matching 304 updated (marked
//!   `Revalidated`).
//! - A miss's waiters are the GETs of the same key with the same credentials (the fingerprint
//!   entries are selected by: requests with other credentials never wait for each other). They
//!   read the first's answer along with its caller, so that it is stored as soon as its body
//!   ends, whether its caller reads it then, later (answers gathered before any body is read,
//!   as a `join_all` does) or never (its body dropped); the caller still gets every frame, in
//!   order. They are answered from the stored entry (marked `Miss`) when its `Vary` selects it
//!   for them; a waiter it does not select sends its own request then. GETs the caller made
//!   conditional and HEAD requests do not take part.
//! - Only requests that come before the first's answer wait. When its answer arrives with no
//!   one waiting (the common case: no crowd), it goes to its caller as it came, with nothing
//!   made to share it, and a GET of the key that comes while its body is still being read
//!   sends its own request: it would otherwise wait on a caller that reads at leisure.
//! - When the first's answer cannot serve the others (an error or a 5xx; for a revalidation,
//!   anything but a matching 304 the cache may keep; for a miss, an answer the cache does not
//!   store, `no-store` among them, or a body that fails or is not the length announced), each
//!   waiter sends its own request at once. When the first is
//!   cancelled before its answer comes (its future dropped), the waiter that came first sends
//!   its request in its place and the others wait for that one.
//! - A miss whose answer the cache did not store, and that was no server error (a 5xx says
//!   nothing of the key), is remembered for a minute (a pass): meanwhile the key's GETs go
//!   upstream at once, none waiting for another, as without a cache. Waiting would cost each
//!   waiter a round trip for an answer that cannot serve it; under load, with many callers
//!   asking for one such key, it was the tail of their latency. An answer one of them brings
//!   that may be stored is stored all the same, ends the pass, and serves those that come
//!   after. Passes are kept in the [`MemoryStore`] beside the entries, bounded and evicted with
//!   them (see its docs), so that one look-up answers for both; beside a store that is not in
//!   memory, in a small one of their own (256 KiB, about 1 200 passes).
//! - No waiter waits longer than the bound (10 s by default: a slow first request delays the
//!   others by at most that) or past its request's deadline ([`CallContext`](courier_core::CallContext)):
//!   then it sends its own request, so none is stranded.
//!
//! # Logs
//!
//! `tracing` events with target `courier::cache` and an `event` field: `store`, `hit`,
//! `revalidated`, `coalesced`, `stale`, `evict`, `invalidate`, `remove`, `validator_mismatch`,
//! `write_dropped`; and from [`DiskStore`], `corrupt`, `refused`, `remove_file`,
//! `remove_failed`, `write_failed`. The URI is logged without its query; credentials are never
//! logged.
//!
//! # Telemetry
//!
//! An active cache makes the call span, `courier.call`, and polls the layers below inside it,
//! so that courier's retry layer hangs its attempt spans under it; a fresh hit is a call span
//! with no attempt. The span ends with `courier.cache.status` and the status the caller gets.
//! A revalidation within `stale-while-revalidate` has a span of its own,
//! `courier.cache.revalidate` (`DEBUG`, with no parent: the caller's call has ended), that the
//! layers below hang their attempts under.
//! With the `metrics` feature, `courier.cache.lookups` counts the lookups by status. See
//! [`telemetry`].
//!
//! # Features
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod ascii;
mod body;
mod disk;
mod entry;
mod flight;
pub mod future;
mod key;
mod layer;
mod response;
mod service;
mod store;
pub mod telemetry;

pub use body::CacheBody;
pub use disk::DiskStore;
pub use entry::{Entry, Variants};
pub use layer::{
    DEFAULT_CAPACITY, DEFAULT_MAX_ENTRY_BYTES, DEFAULT_SINGLE_FLIGHT_WAIT, EtagCacheLayer,
};
pub use service::{BACKGROUND_REVALIDATION_TIMEOUT, EtagCache};
pub use store::{CacheStore, MemoryStore, StoreFuture};
