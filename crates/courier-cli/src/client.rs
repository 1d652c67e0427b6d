//! The transport options every sending subcommand shares (`--cacert`, `--cert`, `--key`,
//! `-A`), and the client they build under the preset.

use bytes::Bytes;
use clap::Args;
use courier::CourierLayer;
use courier::core::FailureKind;
use courier::transport::HyperService;
use http::HeaderValue;
use http_body_util::Full;

use crate::parse;

/// The preset over courier's hyper client: HTTPS with the system's trust store (feature
/// `rustls`, on by default), plus any `--cacert` roots and `--cert` identity; requests with
/// bodies of type `B`.
pub(crate) type Client<B = Full<Bytes>> = courier::Courier<HyperService<B>>;

/// Options of the transport under the preset.
#[derive(Debug, Clone, Args)]
pub(crate) struct ClientArgs {
    /// Trust the CA certificates in this PEM file as well as the system's (as curl's --cacert).
    #[cfg(feature = "rustls")]
    #[arg(long, value_name = "FILE", value_parser = parse::checked(parse::ca_file))]
    pub(crate) cacert: Option<parse::CaFile>,
    /// Present the client certificate in this PEM file (then any intermediates) to a server
    /// that asks for one, for mutual TLS (as curl's --cert); needs --key.
    #[cfg(feature = "rustls")]
    #[arg(
        long,
        value_name = "FILE",
        requires = "key",
        value_parser = parse::checked(parse::cert_file)
    )]
    pub(crate) cert: Option<parse::PemFile>,
    /// The private key of --cert, in PEM (as curl's --key); needs --cert.
    #[cfg(feature = "rustls")]
    #[arg(
        long,
        value_name = "FILE",
        requires = "cert",
        value_parser = parse::checked(parse::key_file)
    )]
    pub(crate) key: Option<parse::PemFile>,
    /// The User-Agent of requests that set none with -H; '' sends none
    /// [default: courier/VERSION].
    #[arg(short = 'A', long, value_name = "STRING", value_parser = parse::checked(parse::user_agent))]
    pub(crate) user_agent: Option<HeaderValue>,
}

/// The transport the options describe, checked: made before anything is sent, so that a key
/// that does not match its certificate is a usage error rather than a failed handshake.
#[derive(Debug, Clone)]
pub(crate) struct Transport {
    /// TLS settings of `--cacert`, `--cert` and `--key`; `None` for courier's own.
    #[cfg(feature = "rustls")]
    tls: Option<courier::rustls::ClientConfig>,
    user_agent: Option<HeaderValue>,
}

// === impl ClientArgs ===

impl ClientArgs {
    /// The transport of these options.
    ///
    /// # Errors
    ///
    /// When `--cert` and `--key` are not a certificate and its key, or the `--cacert` roots are
    /// no trust anchors: a message naming the files.
    pub(crate) fn transport(&self) -> Result<Transport, String> {
        Ok(Transport {
            #[cfg(feature = "rustls")]
            tls: self.tls()?,
            user_agent: self.user_agent.clone(),
        })
    }

    #[cfg(feature = "rustls")]
    fn tls(&self) -> Result<Option<courier::rustls::ClientConfig>, String> {
        use courier::transport::tls;
        let roots = self.cacert.as_ref().map(|ca| ca.roots.clone());
        // clap's `requires` makes --cert and --key come together.
        let identity = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                Some(tls::Identity::from_pem(&cert.pem, &key.pem).map_err(|e| {
                    format!(
                        "--cert {} with --key {}: {e}",
                        cert.path.display(),
                        key.path.display()
                    )
                })?)
            }
            _ => None,
        };
        if roots.is_none() && identity.is_none() {
            return Ok(None);
        }
        let roots = roots.unwrap_or_default();
        let config = match identity {
            None => tls::client_config(roots),
            Some(identity) => tls::client_config_with_identity(roots, identity),
        };
        config.map(Some).map_err(|e| match self.cacert_path() {
            Some(path) => format!("{}: {e}", path.display()),
            None => e.to_string(),
        })
    }

    /// The User-Agent sent, for the plan: `None` when none is.
    pub(crate) fn user_agent_shown(&self) -> Option<HeaderValue> {
        match &self.user_agent {
            None => Some(HeaderValue::from_static(
                courier::transport::DEFAULT_USER_AGENT,
            )),
            Some(agent) if agent.is_empty() => None,
            Some(agent) => Some(agent.clone()),
        }
    }

    /// The `--cacert` file, if one was given.
    pub(crate) fn cacert_path(&self) -> Option<&std::path::Path> {
        #[cfg(feature = "rustls")]
        if let Some(ca) = &self.cacert {
            return Some(&ca.path);
        }
        None
    }

    /// The `--cert` file, if one was given.
    pub(crate) fn cert_path(&self) -> Option<&std::path::Path> {
        #[cfg(feature = "rustls")]
        if let Some(cert) = &self.cert {
            return Some(&cert.path);
        }
        None
    }
}

// === impl Transport ===

impl Transport {
    /// `layer` over a hyper client of this transport.
    pub(crate) fn client<B>(&self, layer: CourierLayer) -> Client<B>
    where
        B: http_body::Body + Send + 'static,
        B::Data: Send,
    {
        let layer = match &self.user_agent {
            None => layer,
            Some(agent) if agent.is_empty() => layer.user_agent(None::<HeaderValue>),
            Some(agent) => layer.user_agent(agent.clone()),
        };
        #[cfg(feature = "rustls")]
        if let Some(config) = &self.tls {
            return layer.hyper_with(courier::transport::hyper_client_with_tls(config.clone()));
        }
        layer.hyper()
    }
}

/// An error of the stack as one line, with what to do about a TLS handshake that failed: a
/// server's certificate refused here, or this client refused by the server.
pub(crate) fn describe(err: &courier::Error) -> String {
    match err {
        courier::Error::Transport {
            kind: FailureKind::Tls,
            source,
            ..
        } if refused_by_the_server(&**source) => format!(
            "{err}; the server refused the TLS handshake (not retried): if it asks for a client \
             certificate, give one it trusts with --cert FILE --key FILE"
        ),
        courier::Error::Transport {
            kind: FailureKind::Tls,
            ..
        } => format!(
            "{err}; the server's certificate was not accepted (not retried): if it comes from \
             a private CA, trust that CA with --cacert FILE"
        ),
        _ => err.to_string(),
    }
}

/// Whether the server ended the handshake with an alert: it refused this client (no client
/// certificate, or one it does not trust) rather than this client refusing its certificate.
fn refused_by_the_server(err: &(dyn std::error::Error + 'static)) -> bool {
    #[cfg(feature = "rustls")]
    if let Some(courier::rustls::Error::AlertReceived(_)) =
        courier::core::cause_ref::<courier::rustls::Error>(err)
    {
        return true;
    }
    let _ = err;
    false
}
