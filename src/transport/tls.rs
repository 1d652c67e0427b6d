//! HTTPS settings for the hyper client: rustls, with the operating system's trust store.
//!
//! [`client_config`] builds the `rustls::ClientConfig` that [`hyper_client`](super::hyper_client)
//! uses: certificates are checked by `rustls-platform-verifier` (the verifier reqwest uses), so
//! the hyper and the reqwest transports trust the same roots. Give it extra roots to trust a
//! private CA as well; [`pem_certificates`] reads them from PEM.
//!
//! ```no_run
//! use bytes::Bytes;
//! use courier::transport::{HyperService, hyper_client_with_tls, tls};
//! use http_body_util::Full;
//!
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pem = std::fs::read("ca.pem")?;
//! let config = tls::client_config(tls::pem_certificates(&pem)?)?;
//! let client = courier::CourierLayer::new()
//!     .service(HyperService::new(hyper_client_with_tls::<Full<Bytes>>(config)));
//! # let _ = client; Ok(()) }
//! ```
//!
//! The crypto provider is the process's default when one is installed
//! (`rustls::crypto::CryptoProvider::install_default`), else aws-lc-rs, as reqwest does.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, OtherError, SignatureScheme};
use std::fmt;
use std::sync::Arc;

/// Why TLS settings could not be made: a PEM without certificates, a certificate rustls refuses
/// as a trust anchor, or no trust anchor at all.
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

/// TLS settings that trust the operating system's roots and `extra_roots`: TLS 1.2 and 1.3,
/// no client certificate. ALPN is left for the connector to set.
///
/// # Errors
///
/// When an extra root is not a certificate rustls accepts as a trust anchor, or when there is no
/// trust anchor at all (no extra root, and no trust store on the system).
pub fn client_config(
    extra_roots: impl IntoIterator<Item = CertificateDer<'static>>,
) -> Result<ClientConfig, TlsConfigError> {
    let provider = provider();
    let verifier =
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots, provider.clone())
            .map_err(|e| TlsConfigError::new(format!("no trust anchors: {e}")))?;
    config_with(provider, Arc::new(verifier))
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
        config_with(provider, verifier)
            .expect("the provider's default protocol versions are supported by the provider")
    })
}

fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
}

fn config_with(
    provider: Arc<CryptoProvider>,
    verifier: Arc<dyn ServerCertVerifier>,
) -> Result<ClientConfig, TlsConfigError> {
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsConfigError::new(format!("unusable crypto provider: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
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
