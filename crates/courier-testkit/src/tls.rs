//! A CA made per test, and an HTTPS/1.1 server on 127.0.0.1 presenting one of its certificates.
//!
//! ```no_run
//! use courier_testkit::tls::{TestCa, TlsServer};
//!
//! # async fn run() -> std::io::Result<()> {
//! let ca = TestCa::new();
//! let server = TlsServer::start(ca.leaf(&["127.0.0.1"])).await?;
//! let url = server.url("/hello"); // https://127.0.0.1:<port>/hello
//! let trust = ca.pem();           // give this to the client as an extra root
//! # let _ = (url, trust); Ok(()) }
//! ```
//!
//! Each request is answered `200 OK` with the request's `User-Agent` as the body (empty when it
//! had none), so a test can also see what reached the server.
//!
//! For mutual TLS, a server that requires a client certificate issued by a CA of the test, and
//! a client identity issued by that CA:
//!
//! ```no_run
//! use courier_testkit::tls::{TestCa, TlsServer};
//!
//! # async fn run() -> std::io::Result<()> {
//! let (ca, clients) = (TestCa::new(), TestCa::new());
//! let server = TlsServer::start_requiring_client_certs(ca.leaf(&["127.0.0.1"]), &clients).await?;
//! let identity = clients.client_identity("checkout");
//! let (cert, key) = (identity.cert_pem(), identity.key_pem()); // the client presents these
//! # let _ = (server, cert, key); Ok(()) }
//! ```

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// A certificate authority made for one test: nothing outside the test trusts it.
#[derive(Debug)]
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A server certificate (with its key) issued by a [`TestCa`].
#[derive(Debug)]
pub struct Leaf {
    chain: Vec<CertificateDer<'static>>,
    key: Vec<u8>,
}

/// A client certificate (with its key) issued by a [`TestCa`], for mutual TLS.
#[derive(Debug, Clone)]
pub struct ClientIdentity {
    cert_pem: String,
    key_pem: String,
}

impl ClientIdentity {
    /// The client's certificate in PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The certificate's private key in PEM (PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

// === impl TestCa ===

impl TestCa {
    /// A fresh CA.
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new())
            .expect("no subject alternative names to parse");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "courier test CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("the crypto provider makes keys");
        let issuer =
            CertifiedIssuer::self_signed(params, key).expect("a CA certificate signs itself");
        Self { issuer }
    }

    /// The CA's certificate in PEM, to trust as an extra root.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA's certificate in DER.
    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A certificate for `names` (host names or IP addresses), valid from 1975 to 4096.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        self.issue(names, |_| {})
    }

    /// A certificate for `names` that expired in 2001.
    pub fn expired_leaf(&self, names: &[&str]) -> Leaf {
        self.issue(names, |params| {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        })
    }

    /// A client certificate with common name `name`, for client authentication only, valid
    /// from 1975 to 4096.
    pub fn client_identity(&self, name: &str) -> ClientIdentity {
        let mut params = CertificateParams::new(Vec::<String>::new())
            .expect("no subject alternative names to parse");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("the crypto provider makes keys");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("the CA signs a client certificate");
        ClientIdentity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn issue(&self, names: &[&str], validity: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("names are host names or IPs");
        params
            .distinguished_name
            .push(DnType::CommonName, "courier test server");
        validity(&mut params);
        let key = KeyPair::generate().expect("the crypto provider makes keys");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("the CA signs a leaf");
        Leaf {
            chain: vec![cert.der().clone()],
            key: key.serialize_der(),
        }
    }
}

// === the server ===

/// An HTTPS/1.1 server on 127.0.0.1 presenting one [`Leaf`]. It answers each request with
/// the request's `User-Agent`, but `/redirect?to=URL`, which it answers with a 302 to URL. It
/// stops when dropped.
#[derive(Debug)]
pub struct TlsServer {
    addr: SocketAddr,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Counts {
    connections: AtomicUsize,
    requests: AtomicUsize,
}

impl TlsServer {
    /// Binds a free port on 127.0.0.1 and serves `leaf` there, offering HTTP/1.1 by ALPN.
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    ///
    /// # Panics
    ///
    /// When `leaf`'s key is not one rustls takes (it always is, as [`TestCa`] makes them).
    pub async fn start(leaf: Leaf) -> std::io::Result<Self> {
        Self::serve(leaf, None).await
    }

    /// [`start`](Self::start), refusing every handshake whose client presents no certificate
    /// issued by `clients` (see [`TestCa::client_identity`]).
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub async fn start_requiring_client_certs(
        leaf: Leaf,
        clients: &TestCa,
    ) -> std::io::Result<Self> {
        let mut roots = RootCertStore::empty();
        roots
            .add(clients.der())
            .expect("a CA made by TestCa is a usable trust anchor");
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .expect("one trust anchor is enough for a client verifier");
        Self::serve(leaf, Some(verifier)).await
    }

    async fn serve(
        leaf: Leaf,
        clients: Option<Arc<dyn ClientCertVerifier>>,
    ) -> std::io::Result<Self> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key));
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("aws-lc-rs supports the default versions");
        let builder = match clients {
            None => builder.with_no_client_auth(),
            Some(verifier) => builder.with_client_cert_verifier(verifier),
        };
        let mut config = builder
            .with_single_cert(leaf.chain, key)
            .expect("a leaf made by TestCa is a usable certificate and key");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let task = tokio::spawn(accept_loop(listener, acceptor, counts.clone()));
        Ok(Self { addr, counts, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// `https://<host>:<port><path>`, for a host name that resolves to 127.0.0.1
    /// (`localhost`).
    pub fn url_for(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.addr.port())
    }

    /// TCP connections accepted so far, whether or not their handshake succeeded: one per
    /// attempt of a client without a pooled connection.
    pub fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }

    /// Requests that reached the server over a completed handshake.
    pub fn requests(&self) -> usize {
        self.counts.requests.load(Ordering::SeqCst)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, counts: Arc<Counts>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        counts.connections.fetch_add(1, Ordering::SeqCst);
        let acceptor = acceptor.clone();
        let counts = counts.clone();
        tokio::spawn(async move {
            // A refused handshake is what some tests are about: it ends the connection.
            let tls = match acceptor.accept(tcp).into_fallible().await {
                Ok(tls) => tls,
                Err((_, tcp)) => return close_after_refusal(tcp).await,
            };
            let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                counts.requests.fetch_add(1, Ordering::SeqCst);
                // `/redirect?to=URL`: a 302 to URL, as written.
                if req.uri().path() == "/redirect"
                    && let Some(to) = req.uri().query().and_then(|q| q.strip_prefix("to="))
                {
                    let mut resp = http::Response::new(Full::new(Bytes::new()));
                    *resp.status_mut() = http::StatusCode::FOUND;
                    if let Ok(to) = http::HeaderValue::from_str(to) {
                        resp.headers_mut().insert(http::header::LOCATION, to);
                    }
                    return std::future::ready(Ok::<_, Infallible>(resp));
                }
                let agent = req
                    .headers()
                    .get(http::header::USER_AGENT)
                    .map(|v| Bytes::copy_from_slice(v.as_bytes()))
                    .unwrap_or_default();
                std::future::ready(Ok::<_, Infallible>(http::Response::new(Full::new(agent))))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

/// Ends a connection whose handshake this server refused as a careful server does: its alert
/// sent, the write side closed, and what the client sent meanwhile read and dropped (under
/// TLS 1.3 a client refused for its certificate has finished its handshake and sent its
/// request already), so that the close is no reset that could overtake the alert. At most
/// [`LINGER`].
async fn close_after_refusal(mut tcp: TcpStream) {
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 4096];
    let drain = async { while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// The longest a refused connection is kept open waiting for its client to close it.
const LINGER: Duration = Duration::from_secs(5);
