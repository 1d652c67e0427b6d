//! Rules per destination: which calls a rule takes ([`Route`]), and the preset's service that
//! sends each call through its rule's stack.

use crate::CourierLayer;
use crate::preset::Stack;
use courier_core::BoxError;
use http::uri::Scheme;
use pin_project_lite::pin_project;
use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll, Waker};
use tower_service::Service;

/// Which calls a rule takes: each part given must match, and a route with none takes every
/// call. Hosts are matched without regard to case; a port left out of the URL is its scheme's
/// default.
///
/// ```
/// use courier::routes::Route;
///
/// let partner = Route::new().host("api.partner.example");
/// let internal = Route::new().host("*.internal.example");
/// let payments = Route::new().host("pay.example").path_prefix("/payments").method(http::Method::POST);
/// let get_user = Route::new().grpc_method("users.v1.Users", "GetUser");
/// # let _ = (partner, internal, payments, get_user);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    scheme: Option<Scheme>,
    host: Option<HostPattern>,
    port: Option<u16>,
    methods: Vec<http::Method>,
    path: Option<PathMatch>,
}

/// A host to match: exact, or every subdomain of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// The host, lowercase.
    Exact(Box<str>),
    /// `.example` for `*.example`, lowercase.
    Subdomains(Box<str>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PathMatch {
    /// Whole segments: the prefix, then the end or a `/` (a prefix ending in `/` needs none).
    Prefix(Box<str>),
    /// The whole path.
    Exact(Box<str>),
}

// === impl HostPattern ===

impl HostPattern {
    /// `api.example` or `*.example`.
    pub(crate) fn parse(pattern: &str) -> Result<Self, String> {
        let lower = pattern.trim().to_ascii_lowercase();
        let (name, sub) = match lower.strip_prefix("*.") {
            Some(rest) => (rest, true),
            None => (lower.as_str(), false),
        };
        let valid = !name.is_empty()
            && name.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '[' | ']')
            })
            && !name.starts_with('.')
            && !name.ends_with('.');
        if !valid {
            return Err(format!(
                "must be a host (api.example) or every subdomain of one (*.example), got {pattern:?}"
            ));
        }
        Ok(if sub {
            Self::Subdomains(format!(".{name}").into())
        } else {
            Self::Exact(name.into())
        })
    }

    #[inline]
    fn matches(&self, host: &str) -> bool {
        match self {
            Self::Exact(h) => host.eq_ignore_ascii_case(h),
            Self::Subdomains(suffix) => {
                host.len() > suffix.len()
                    && host.is_char_boundary(host.len() - suffix.len())
                    && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
        }
    }
}

// === impl Route ===

impl Route {
    /// A route that takes every call.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only calls with this scheme.
    pub fn scheme(mut self, scheme: Scheme) -> Self {
        self.scheme = Some(scheme);
        self
    }

    /// Only calls to this host: `api.example` (any case), or `*.example` for every subdomain
    /// of `example` (not `example` itself). A pattern that is not a host matches no call.
    pub fn host(mut self, pattern: &str) -> Self {
        self.host = Some(HostPattern::parse(pattern).unwrap_or(HostPattern::Exact(pattern.into())));
        self
    }

    /// Only calls to this port (the scheme's default when the URL names none).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Calls with this method (each call adds one: any of them matches).
    pub fn method(mut self, method: http::Method) -> Self {
        self.methods.push(method);
        self
    }

    /// Only paths under `prefix`, whole segments: `/payments` takes `/payments` and
    /// `/payments/7`, not `/paymentsfoo`.
    pub fn path_prefix(mut self, prefix: &str) -> Self {
        self.path = Some(PathMatch::Prefix(prefix.into()));
        self
    }

    /// Only the methods of one gRPC service, by its full name (`package.Service`).
    pub fn grpc_service(mut self, service: &str) -> Self {
        self.path = Some(PathMatch::Prefix(format!("/{service}/").into()));
        self
    }

    /// Only one method of a gRPC service: `("package.Service", "Method")`.
    pub fn grpc_method(mut self, service: &str, method: &str) -> Self {
        self.path = Some(PathMatch::Exact(format!("/{service}/{method}").into()));
        self
    }

    /// Whether the route takes `req`.
    pub fn matches<B>(&self, req: &http::Request<B>) -> bool {
        self.matches_target(&mut Target::new(req.method(), req.uri(), req.headers()))
    }

    #[inline]
    fn matches_target(&self, target: &mut Target<'_>) -> bool {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == target.method) {
            return false;
        }
        if let Some(path) = &self.path {
            let p = target.uri.path();
            let ok = match path {
                PathMatch::Exact(e) => p == &**e,
                PathMatch::Prefix(pre) => {
                    p.starts_with(&**pre)
                        && (pre.ends_with('/')
                            || p.len() == pre.len()
                            || p.as_bytes()[pre.len()] == b'/')
                }
            };
            if !ok {
                return false;
            }
        }
        if let Some(scheme) = &self.scheme
            && target.uri.scheme() != Some(scheme)
        {
            return false;
        }
        if self.host.is_none() && self.port.is_none() {
            return true;
        }
        let uri = target.uri;
        match target.host_port() {
            Some((host, port)) => self.matches_host(host, port, uri),
            None => false,
        }
    }

    #[inline]
    fn matches_host(&self, host: &str, port: Option<u16>, uri: &http::Uri) -> bool {
        if let Some(pattern) = &self.host
            && !pattern.matches(host)
        {
            return false;
        }
        if let Some(want) = self.port {
            let port = port.or_else(|| match uri.scheme_str() {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            });
            if port != Some(want) {
                return false;
            }
        }
        true
    }
}

/// What the rules match one call on. The host and port are found once, by the first rule
/// that asks (finding them is the costly part of a match: about 700 instructions).
struct Target<'a> {
    method: &'a http::Method,
    uri: &'a http::Uri,
    headers: &'a http::HeaderMap,
    host: Option<Option<(Cow<'a, str>, Option<u16>)>>,
}

impl<'a> Target<'a> {
    #[inline]
    fn new(method: &'a http::Method, uri: &'a http::Uri, headers: &'a http::HeaderMap) -> Self {
        Self {
            method,
            uri,
            headers,
            host: None,
        }
    }

    /// The host and port the call is for: the URI's, else the `Host` header's.
    fn host_port(&mut self) -> Option<(&str, Option<u16>)> {
        let (uri, headers) = (self.uri, self.headers);
        self.host
            .get_or_insert_with(|| match uri.authority() {
                Some(a) => Some((Cow::Borrowed(a.host()), a.port_u16())),
                None => headers
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .and_then(|h| h.parse::<http::uri::Authority>().ok())
                    .map(|a| (Cow::Owned(a.host().to_owned()), a.port_u16())),
            })
            .as_ref()
            .map(|(host, port)| (&**host, *port))
    }
}

// === the rules and where they live ===

/// The rules of one layer: a route and its layer each, first match wins; the default's layer
/// when set (a reload sets it), else the layer the rules belong to.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    pub(crate) default: Option<CourierLayer>,
    pub(crate) routes: Vec<(Route, CourierLayer)>,
}

/// The rules now, and how many times they were replaced.
#[derive(Debug)]
pub(crate) struct RouteSource {
    current: RwLock<Arc<Rules>>,
    generation: AtomicU64,
}

impl RouteSource {
    pub(crate) fn new(rules: Rules) -> Self {
        Self {
            current: RwLock::new(Arc::new(rules)),
            generation: AtomicU64::new(0),
        }
    }

    pub(crate) fn rules(&self) -> Arc<Rules> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn replace(&self, rules: Rules) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// The preset's service with rules: the transport, and a stack over it per rule.
pub(crate) struct Routed<S> {
    transport: S,
    source: Arc<RouteSource>,
    generation: u64,
    table: Arc<Table<S>>,
    /// The stack of the last call's rule (its index in the table, the default's last), this
    /// service's own: a run of calls through one rule keeps what its layers remember between
    /// calls (the previous host's breaker, bucket, limit) and clones nothing.
    last: Option<(usize, Stack<S>)>,
}

struct Table<S> {
    default: Stack<S>,
    routes: Vec<(Route, Stack<S>)>,
    /// The routes that name one exact host, by that host (lowercase): their indices, in order.
    /// A call is matched only against its own host's, not against every rule.
    by_host: HashMap<Box<str>, Vec<usize>>,
    /// The other routes (any host, or a host's subdomains): their indices, in order.
    others: Vec<usize>,
}

impl<S: Clone> Clone for Routed<S> {
    fn clone(&self) -> Self {
        Self {
            transport: self.transport.clone(),
            source: Arc::clone(&self.source),
            generation: self.generation,
            table: Arc::clone(&self.table),
            last: None,
        }
    }
}

impl<S> std::fmt::Debug for Routed<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routed")
            .field("routes", &self.table.routes.len())
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl<S: Clone> Routed<S> {
    /// The stacks of `source`'s rules over `transport`; `default` is the layer the rules
    /// belong to, whose stack takes what no route takes unless the rules name a default.
    pub(crate) fn new(
        transport: S,
        source: Arc<RouteSource>,
        default: &CourierLayer,
    ) -> (Self, Stack<S>) {
        let generation = source.generation();
        let rules = source.rules();
        let default_stack = rules
            .default
            .as_ref()
            .unwrap_or(default)
            .stack(transport.clone());
        let table = Arc::new(Table::build(&rules, default_stack.clone(), &transport));
        (
            Self {
                transport,
                source,
                generation,
                table,
                last: None,
            },
            default_stack,
        )
    }

    /// Picks up the rules of the last reload.
    #[cold]
    fn refresh(&mut self) {
        self.generation = self.source.generation();
        let rules = self.source.rules();
        let default = match &rules.default {
            Some(layer) => layer.stack(self.transport.clone()),
            None => self.table.default.clone(),
        };
        self.table = Arc::new(Table::build(&rules, default, &self.transport));
        self.last = None;
    }
}

impl<S: Clone> Table<S> {
    fn build(rules: &Rules, default: Stack<S>, transport: &S) -> Self {
        let mut by_host: HashMap<Box<str>, Vec<usize>> = HashMap::new();
        let mut others = Vec::new();
        for (i, (route, _)) in rules.routes.iter().enumerate() {
            match &route.host {
                Some(HostPattern::Exact(host)) => by_host.entry(host.clone()).or_default().push(i),
                _ => others.push(i),
            }
        }
        Self {
            default,
            routes: rules
                .routes
                .iter()
                .map(|(route, layer)| (route.clone(), layer.stack(transport.clone())))
                .collect(),
            by_host,
            others,
        }
    }
}

impl<S> Routed<S> {
    /// The index of the first route that takes the call, the default's (`routes.len()`) when
    /// none does.
    #[inline]
    fn pick(&self, method: &http::Method, uri: &http::Uri, headers: &http::HeaderMap) -> usize {
        let table = &*self.table;
        let routes = &table.routes;
        let mut target = Target::new(method, uri, headers);
        let mut first = routes.len();
        if !table.by_host.is_empty() {
            let same_host: &[usize] = match target.host_port() {
                Some((host, _)) if host.bytes().any(|b| b.is_ascii_uppercase()) => table
                    .by_host
                    .get(host.to_ascii_lowercase().as_str())
                    .map_or(&[], Vec::as_slice),
                Some((host, _)) => table.by_host.get(host).map_or(&[], Vec::as_slice),
                None => &[],
            };
            if let Some(&i) = same_host
                .iter()
                .find(|&&i| routes[i].0.matches_target(&mut target))
            {
                first = i;
            }
        }
        table
            .others
            .iter()
            .copied()
            .take_while(|&i| i < first)
            .find(|&i| routes[i].0.matches_target(&mut target))
            .unwrap_or(first)
    }

    /// Sends `req` through its rule's stack: this service's own copy of it, called at once
    /// when it is ready (the preset's layers are ready when the transport is), else a clone
    /// polled ready inside the future.
    #[inline]
    pub(crate) fn call<B>(
        &mut self,
        req: http::Request<B>,
    ) -> RouteFuture<Stack<S>, http::Request<B>>
    where
        S: Clone,
        Stack<S>: Service<http::Request<B>, Error = BoxError> + Clone,
    {
        if self.source.generation.load(Ordering::Acquire) != self.generation {
            self.refresh();
        }
        let index = self.pick(req.method(), req.uri(), req.headers());
        let stack = match &mut self.last {
            Some((last, stack)) if *last == index => stack,
            slot => {
                let table = &self.table;
                let stack = table
                    .routes
                    .get(index)
                    .map_or(&table.default, |(_, stack)| stack)
                    .clone();
                &mut slot.insert((index, stack)).1
            }
        };
        match stack.poll_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(())) => RouteFuture::called(stack.call(req)),
            Poll::Ready(Err(e)) => RouteFuture::failed(e),
            Poll::Pending => RouteFuture::waiting(stack.clone(), req),
        }
    }
}

pin_project! {
    /// The preset's response future: the stack's own, or, for a call with rules whose stack
    /// was not ready at once, the wait for it first.
    pub struct RouteFuture<Svc, Req>
    where
        Svc: Service<Req>,
    {
        #[pin]
        state: State<Svc, Req>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<Svc, Req>
    where
        Svc: Service<Req>,
    {
        Called { #[pin] fut: Svc::Future },
        Waiting { svc: Svc, req: Option<Req> },
        Failed { err: Option<BoxError> },
    }
}

impl<Svc: Service<Req>, Req> std::fmt::Debug for RouteFuture<Svc, Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteFuture").finish_non_exhaustive()
    }
}

impl<Svc: Service<Req>, Req> RouteFuture<Svc, Req> {
    #[inline]
    pub(crate) fn called(fut: Svc::Future) -> Self {
        Self {
            state: State::Called { fut },
        }
    }

    fn waiting(svc: Svc, req: Req) -> Self {
        Self {
            state: State::Waiting {
                svc,
                req: Some(req),
            },
        }
    }

    fn failed(err: BoxError) -> Self {
        Self {
            state: State::Failed { err: Some(err) },
        }
    }
}

impl<Svc, Req, T> Future for RouteFuture<Svc, Req>
where
    Svc: Service<Req, Response = T, Error = BoxError>,
{
    type Output = Result<T, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Called { fut } => return fut.poll(cx),
                StateProj::Waiting { svc, req } => {
                    std::task::ready!(svc.poll_ready(cx))?;
                    let Some(req) = req.take() else {
                        return Poll::Ready(Err("a routed call was polled after it ended".into()));
                    };
                    let fut = svc.call(req);
                    this.state.set(State::Called { fut });
                }
                StateProj::Failed { err } => {
                    return Poll::Ready(Err(err
                        .take()
                        .unwrap_or_else(|| "a routed call was polled after it ended".into())));
                }
            }
        }
    }
}
