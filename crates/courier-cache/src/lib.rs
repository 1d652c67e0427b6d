//! EtagCacheLayer: conditional requests, 304s served from memory, bounded.
