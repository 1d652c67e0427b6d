//! RetryLayer: retry only what is safe, wait as long as the server asks.
