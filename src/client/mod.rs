//! `Client`: a client in reqwest's shape over the preset.

/// A client in reqwest's shape over the preset.
#[derive(Debug, Clone)]
pub struct Client;
/// Builds a [`Client`].
#[derive(Debug)]
pub struct ClientBuilder;
/// One request being built.
#[derive(Debug)]
pub struct RequestBuilder;
/// An answer.
#[derive(Debug)]
pub struct Response;
