//! HTTPS settings for both transports: rustls, with the operating system's trust store, extra
//! roots of your own, and a client identity for mutual TLS.
//!
//! [`client_config`] builds the `rustls::ClientConfig` that [`hyper_client`](super::hyper_client)
//! uses: certificates are checked by `rustls-platform-verifier` (the verifier reqwest uses).
//! Give it extra roots to trust a private CA as well; [`pem_certificates`] reads them from PEM.
//! [`client_config_with_identity`] does the same and presents an [`Identity`] (a certificate
//! chain and its private key) to a server that asks for one.
//!
//! The same settings go to either transport, so that both trust the same roots and present the
//! same identity: [`hyper_client_with_tls`](super::hyper_client_with_tls) under
//! [`CourierLayer::hyper_with`](crate::CourierLayer::hyper_with), and
//! [`reqwest_client_builder_with_tls`](super::reqwest_client_builder_with_tls) under
//! [`CourierLayer::reqwest`](crate::CourierLayer::reqwest). Both keep every setting of the
//! layer, its [`user_agent`](crate::CourierLayer::user_agent) included.
//!
//! ```no_run
//! # #[cfg(feature = "preset")] {
//! use bytes::Bytes;
//! use courier::CourierLayer;
//! use courier::transport::{hyper_client_with_tls, tls};
//! use http_body_util::Full;
//!
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let roots = tls::pem_certificates(&std::fs::read("ca.pem")?)?;
//! let (cert, key) = (std::fs::read("client.pem")?, std::fs::read("client.key")?);
//! let identity = tls::Identity::from_pem(&cert, &key)?;
//! let config = tls::client_config_with_identity(roots, identity)?;
//! let layer = CourierLayer::new();
//!
//! // hyper
//! let client = layer.hyper_with(hyper_client_with_tls::<Full<Bytes>>(config.clone()));
//! # let _ = client;
//! // reqwest (feature `reqwest`)
//! # #[cfg(feature = "reqwest")] {
//! use courier::transport::reqwest_client_builder_with_tls;
//! let client = layer.reqwest::<Full<Bytes>>(reqwest_client_builder_with_tls(config).build()?);
//! # let _ = client; }
//! # Ok(()) }
//! # }
//! ```
//!
//! The crypto provider is the process's default when one is installed
//! (`rustls::crypto::CryptoProvider::install_default`), else aws-lc-rs, as reqwest does.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, InconsistentKeys, OtherError,
    SignatureScheme,
};
use std::fmt;
use std::sync::Arc;

/// Why TLS settings could not be made: a PEM without certificates, a certificate rustls refuses
/// as a trust anchor, no trust anchor at all, or an [`Identity`] whose key is unusable or does
/// not match its certificate.
#[derive(Debug)]
pub struct TlsConfigError {
    message: String,
}

impl TlsConfigError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl fmt::Display for TlsConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TlsConfigError {}

/// The certificates in a PEM text (every `CERTIFICATE` block; other blocks are skipped).
///
/// # Errors
///
/// When a block is malformed, or the text holds no certificate.
pub fn pem_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError::new(format!("unreadable PEM: {}", pem_error(&e))))?;
    if certs.is_empty() {
        return Err(TlsConfigError::new(
            "no certificate in the PEM text (expected a -----BEGIN CERTIFICATE----- block)",
        ));
    }
    Ok(certs)
}

/// A PEM error in words: rustls prints the markers it quotes as lists of byte values.
fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    use courier_core::excerpt::Excerpt;
    use rustls::pki_types::pem::Error;
    match e {
        Error::MissingSectionEnd { end_marker } => format!(
            "a block is not closed: no \"-----END {}-----\" line follows it",
            Excerpt::bytes(end_marker)
        ),
        Error::IllegalSectionStart { line } => format!(
            "the line \"{}\" starts a block but is not a well-formed -----BEGIN ...----- line",
            Excerpt::bytes(line)
        ),
        Error::Base64Decode(why) => format!("a block's body is not base64: {why}"),
        other => other.to_string(),
    }
}

/// A client identity for mutual TLS: a certificate chain and the private key of its first
/// certificate, checked to match when it is made. Give it to [`client_config_with_identity`].
///
/// # Clone
///
/// Cheap: the chain and the key are shared behind an `Arc`.
#[derive(Clone)]
pub struct Identity {
    key: Arc<CertifiedKey>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("certificates", &self.key.cert.len())
            .finish_non_exhaustive()
    }
}

// === impl Identity ===

impl Identity {
    /// The identity of a certificate chain and a private key, both in PEM.
    ///
    /// `cert_chain_pem` holds the client's certificate first, then any intermediates (every
    /// `CERTIFICATE` block, as [`pem_certificates`] reads them); `key_pem` holds the certificate's
    /// private key, the first `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` block (other
    /// blocks are skipped, so one file holding both works for both).
    ///
    /// # Errors
    ///
    /// When either text is malformed or lacks its block, when the crypto provider cannot sign
    /// with the key, and when the key does not match the first certificate: a mismatch is found
    /// here, before any connection, not at the first handshake. (A key of a crypto provider
    /// that cannot tell its public key is taken unchecked, as rustls takes it.)
    pub fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsConfigError> {
        let chain = pem_certificates(cert_chain_pem)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => TlsConfigError::new(
                "no private key in the PEM text (expected a -----BEGIN PRIVATE KEY-----, \
                 -----BEGIN RSA PRIVATE KEY----- or -----BEGIN EC PRIVATE KEY----- block)",
            ),
            e => TlsConfigError::new(format!("unreadable PEM: {}", pem_error(&e))),
        })?;
        let signing = provider().key_provider.load_private_key(key).map_err(|e| {
            TlsConfigError::new(format!("the private key cannot be used for signing: {e}"))
        })?;
        let key = CertifiedKey::new(chain, signing);
        match key.keys_match() {
            Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
                return Err(TlsConfigError::new(
                    "the private key does not match the certificate (the first of the chain)",
                ));
            }
            Err(e) => {
                return Err(TlsConfigError::new(format!(
                    "the certificate cannot be read: {e}"
                )));
            }
        }
        Ok(Self { key: Arc::new(key) })
    }
}

/// TLS settings that trust the operating system's roots and `extra_roots`: TLS 1.2 and 1.3,
/// no client certificate. ALPN is left for the transport to set.
///
/// # Errors
///
/// When an extra root is not a certificate rustls accepts as a trust anchor, or when there is no
/// trust anchor at all (no extra root, and no trust store on the system).
pub fn client_config(
    extra_roots: impl IntoIterator<Item = CertificateDer<'static>>,
) -> Result<ClientConfig, TlsConfigError> {
    let provider = provider();
    config_with(provider.clone(), verifier(extra_roots, provider)?, None)
}

/// [`client_config`] presenting `identity` to a server that asks for a client certificate
/// (mutual TLS).
///
/// # Errors
///
/// As [`client_config`].
pub fn client_config_with_identity(
    extra_roots: impl IntoIterator<Item = CertificateDer<'static>>,
    identity: Identity,
) -> Result<ClientConfig, TlsConfigError> {
    let provider = provider();
    config_with(
        provider.clone(),
        verifier(extra_roots, provider)?,
        Some(identity),
    )
}

/// [`client_config`] with no extra roots; where the system has no trust store, settings whose
/// every handshake fails with a TLS error that says why (plain HTTP is unaffected).
pub(crate) fn platform_config() -> ClientConfig {
    client_config([]).unwrap_or_else(|err| {
        let provider = provider();
        let verifier = Arc::new(NoTrustAnchors {
            reason: Arc::new(err),
            provider: provider.clone(),
        });
        config_with(provider, verifier, None)
            .expect("the provider's default protocol versions are supported by the provider")
    })
}

fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
}

/// The platform's verifier, trusting `extra_roots` as well.
fn verifier(
    extra_roots: impl IntoIterator<Item = CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, TlsConfigError> {
    let verifier = rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots, provider)
        .map_err(|e| TlsConfigError::new(format!("no trust anchors: {e}")))?;
    Ok(Arc::new(verifier))
}

fn config_with(
    provider: Arc<CryptoProvider>,
    verifier: Arc<dyn ServerCertVerifier>,
    identity: Option<Identity>,
) -> Result<ClientConfig, TlsConfigError> {
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsConfigError::new(format!("unusable crypto provider: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    Ok(match identity {
        None => builder.with_no_client_auth(),
        Some(identity) => {
            builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(identity.key)))
        }
    })
}

/// The verifier of a client built where the system has no trust store: every certificate is
/// refused, with the reason.
#[derive(Debug)]
struct NoTrustAnchors {
    reason: Arc<TlsConfigError>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NoTrustAnchors {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(self.reason.clone()),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_errors_are_in_words() {
        let unterminated = b"-----BEGIN CERTIFICATE-----\nMIIB\n";
        let err = pem_certificates(unterminated).unwrap_err().to_string();
        assert_eq!(
            err,
            "unreadable PEM: a block is not closed: no \"-----END CERTIFICATE-----\" line \
             follows it"
        );
        let err =
            pem_certificates(b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n")
                .unwrap_err()
                .to_string();
        assert!(
            err.starts_with("unreadable PEM: a block's body is not base64"),
            "{err}"
        );
        let err = pem_certificates(b"hello").unwrap_err().to_string();
        assert!(err.starts_with("no certificate in the PEM text"), "{err}");
    }
}
