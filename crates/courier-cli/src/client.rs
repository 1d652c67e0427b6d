//! The transport options every sending subcommand shares (`--cacert`, `-A`), and the client
//! they build under the preset.

use bytes::Bytes;
use clap::Args;
use courier::CourierLayer;
use courier::core::FailureKind;
use courier::transport::HyperService;
use http::HeaderValue;
use http_body_util::Full;

use crate::parse;

/// The preset over courier's hyper client: HTTPS with the system's trust store (feature
/// `rustls`, on by default), plus any `--cacert` roots; requests with bodies of type `B`.
pub(crate) type Client<B = Full<Bytes>> = courier::Courier<HyperService<B>>;

/// Options of the transport under the preset.
#[derive(Debug, Clone, Args)]
pub(crate) struct ClientArgs {
    /// Trust the CA certificates in this PEM file as well as the system's (as curl's --cacert).
    #[cfg(feature = "rustls")]
    #[arg(long, value_name = "FILE", value_parser = parse::checked(parse::ca_file))]
    pub(crate) cacert: Option<parse::CaFile>,
    /// The User-Agent of requests that set none with -H; '' sends none
    /// [default: courier/VERSION].
    #[arg(short = 'A', long, value_name = "STRING", value_parser = parse::checked(parse::user_agent))]
    pub(crate) user_agent: Option<HeaderValue>,
}

// === impl ClientArgs ===

impl ClientArgs {
    /// `layer` over a hyper client configured by these options.
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
        if let Some(ca) = &self.cacert {
            return layer.hyper_with(courier::transport::hyper_client_with_tls(ca.config.clone()));
        }
        layer.hyper()
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
}

/// An error of the stack as one line, with what to do about a certificate that was refused.
pub(crate) fn describe(err: &courier::Error) -> String {
    match err {
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
