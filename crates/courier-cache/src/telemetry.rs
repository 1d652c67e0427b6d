//! What the cache tells spans and (feature `metrics`) the `metrics` facade.
//!
//! Every answer of an active cache carries a [`CacheStatus`]; each one but `bypass` is a
//! lookup. It is recorded as `courier.cache.status` on the current span (a span of the
//! caller's that declares the field, as the `courier` facade's call span does).
//!
//! # Metrics
//!
//! | name | kind | unit | labels |
//! | --- | --- | --- | --- |
//! | `courier.cache.lookups` | counter | {lookup} | `status`: `hit`, `revalidated`, `miss`, `stale` |

use courier_core::CacheStatus;
use http::Response;

/// `courier.cache.lookups`.
pub const LOOKUPS: &str = "courier.cache.lookups";

/// Describes the metric above to the installed recorder (unit and help text).
#[cfg(feature = "metrics")]
pub fn describe() {
    metrics::describe_counter!(
        LOOKUPS,
        metrics::Unit::Count,
        "Cache lookups by status: hit, revalidated, miss, stale."
    );
}

/// Records the status of an answer the cache gives, and hands it on.
#[inline]
pub(crate) fn observed<B, E>(res: Result<Response<B>, E>) -> Result<Response<B>, E> {
    if let Ok(r) = &res
        && let Some(&status) = r.extensions().get::<CacheStatus>()
        && status != CacheStatus::Bypass
    {
        lookup(status);
    }
    res
}

#[inline(never)]
fn lookup(status: CacheStatus) {
    tracing::Span::current().record("courier.cache.status", status.as_str());
    #[cfg(feature = "metrics")]
    metrics::counter!(LOOKUPS, "status" => status.as_str()).increment(1);
}
