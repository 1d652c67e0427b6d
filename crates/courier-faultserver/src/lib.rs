//! A real HTTP server that misbehaves on request, for tests, demos and benchmarks.
