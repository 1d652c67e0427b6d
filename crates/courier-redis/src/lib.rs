//! A Redis-backed store for courier's token bucket.
