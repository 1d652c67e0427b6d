//! TokenBucketRateLimitLayer: per-host pacing, wait or reject, obeying the server's quota.
