//! Request dispatch: which endpoint answers, and the response helpers they share.

use courier_core::excerpt::Excerpt;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::body::ResponseBody;
use crate::hits::{Hit, HitsBody};
use crate::plan::{ValidStep, read_plan};
use crate::server::{ConnControl, Shared};

/// The largest request body the server reads (plans, `POST /conditional`, `/s/{name}`).
pub(crate) const MAX_BODY: usize = 1024 * 1024;

pub(crate) type Resp = Response<ResponseBody>;

/// Answers one request. Never fails: every problem becomes a 4xx answer.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    control: Arc<ConnControl>,
    req: Request<Incoming>,
) -> Result<Resp, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let mut resp = route(&shared, &control, req).await;
    if !resp.headers().contains_key(header::DATE) {
        let date = httpdate::fmt_http_date(shared.now());
        if let Ok(value) = HeaderValue::from_str(&date) {
            resp.headers_mut().insert(header::DATE, value);
        }
    }
    tracing::debug!(%method, %path, status = resp.status().as_u16(), "answered");
    Ok(resp)
}

async fn route(shared: &Shared, control: &Arc<ConnControl>, req: Request<Incoming>) -> Resp {
    let path = req.uri().path().to_owned();
    if let Some(name) = path.strip_prefix("/s/") {
        return scripted(shared, control, name, req).await;
    }
    if let Some(name) = path.strip_prefix("/__plan/") {
        return plan(shared, name, req).await;
    }
    if let Some(name) = path.strip_prefix("/__hits/") {
        return hits(shared, name, &req);
    }
    if let Some(name) = path.strip_prefix("/limited/") {
        shared.record(&format!("limited/{name}"), hit(shared, &req));
        return crate::limited::limited(shared, name, &req);
    }
    match path.as_str() {
        "/items" | "/cursor" => {
            shared.record(&path[1..], hit(shared, &req));
            if !matches!(*req.method(), Method::GET | Method::HEAD) {
                return method_not_allowed("GET, HEAD");
            }
            if path == "/items" {
                crate::pages::items(&req)
            } else {
                crate::pages::cursor(&req)
            }
        }
        "/conditional" => {
            shared.record("conditional", hit(shared, &req));
            crate::conditional::conditional(shared, req).await
        }
        "/" => text(StatusCode::OK, INDEX),
        _ => text(
            StatusCode::NOT_FOUND,
            &format!("no endpoint at {path}; GET / lists the endpoints\n"),
        ),
    }
}

const INDEX: &str = "courier fault server
POST   /__plan/{name}   {\"plan\": [{\"status\": 503, \"headers\": {}, \"body\": \"\", \"delay_ms\": 0, \"drip_ms\": 0, \"reset\": false, \"times\": 1}]}
DELETE /__plan/{name}   clear the plan and the hits
GET    /__hits/{name}   {\"hits\": [...]}
ANY    /s/{name}        answer by the plan (200 once it is used up)
GET    /items?page=&per_page=
GET    /cursor?limit=&cursor=
GET    /conditional     (POST changes it)
GET    /limited/{name}?rate=&burst=
";

fn hit<B>(shared: &Shared, req: &Request<B>) -> Hit {
    let (parts, ()) = clone_head(req).into_parts();
    Hit::from_parts(&parts, shared.started())
}

fn clone_head<B>(req: &Request<B>) -> Request<()> {
    let mut head = Request::new(());
    *head.method_mut() = req.method().clone();
    *head.uri_mut() = req.uri().clone();
    *head.version_mut() = req.version();
    *head.headers_mut() = req.headers().clone();
    head
}

// === /s/{name} ===

async fn scripted(
    shared: &Shared,
    control: &Arc<ConnControl>,
    name: &str,
    req: Request<Incoming>,
) -> Resp {
    if name.is_empty() {
        return text(StatusCode::NOT_FOUND, "name the plan: /s/{name}\n");
    }
    let step = shared
        .record_and_step(name, hit(shared, &req))
        .unwrap_or_else(ValidStep::used_up);
    if step.reset {
        if !step.delay.is_zero() {
            tokio::time::sleep(step.delay).await;
        }
        control.reset();
        // The connection task drops this future along with the connection.
        return std::future::pending().await;
    }
    let version = req.version();
    // Read what the client sent so a keep-alive connection stays usable; a body too large
    // or cut short does not change the answer.
    let _ = read_body(req.into_body()).await;
    if !step.delay.is_zero() {
        tokio::time::sleep(step.delay).await;
    }
    let has_body = !step.body.is_empty();
    let mut body = ResponseBody::drip(step.body, step.drip);
    if step.cut_short {
        let close = (version != http::Version::HTTP_2).then(|| Arc::clone(control));
        body = body.cut_short(close);
    }
    let mut resp = Response::new(body);
    *resp.status_mut() = step.status;
    if has_body {
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    for (name, value) in step.headers {
        resp.headers_mut().insert(name, value);
    }
    resp
}

// === /__plan/{name} and /__hits/{name} ===

async fn plan(shared: &Shared, name: &str, req: Request<Incoming>) -> Resp {
    if name.is_empty() {
        return text(StatusCode::NOT_FOUND, "name the plan: /__plan/{name}\n");
    }
    match *req.method() {
        Method::POST => {
            let body = match read_body(req.into_body()).await {
                Ok(body) => body,
                Err(resp) => return resp,
            };
            match read_plan(&body) {
                Ok(plan) => {
                    let steps = plan.remaining();
                    shared.set_plan(name, plan);
                    tracing::debug!(name, steps, "plan set");
                    json(
                        StatusCode::OK,
                        &serde_json::json!({ "name": name, "requests": steps }),
                    )
                }
                Err(e) => text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
            }
        }
        Method::DELETE => {
            shared.clear(name);
            json(
                StatusCode::OK,
                &serde_json::json!({ "name": name, "cleared": true }),
            )
        }
        _ => method_not_allowed("POST, DELETE"),
    }
}

fn hits<B>(shared: &Shared, name: &str, req: &Request<B>) -> Resp {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return method_not_allowed("GET, HEAD");
    }
    json(
        StatusCode::OK,
        &HitsBody {
            hits: shared.hits(name),
        },
    )
}

// === helpers ===

/// Reads a request body of at most [`MAX_BODY`] bytes.
pub(crate) async fn read_body(body: Incoming) -> Result<Bytes, Resp> {
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => {
            if e.is::<http_body_util::LengthLimitError>() {
                Err(text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the body is larger than {MAX_BODY} bytes; send less\n"),
                ))
            } else {
                Err(text(
                    StatusCode::BAD_REQUEST,
                    &format!("the body could not be read: {e}\n"),
                ))
            }
        }
    }
}

/// A `text/plain` answer.
pub(crate) fn text(status: StatusCode, message: &str) -> Resp {
    let mut resp = Response::new(ResponseBody::full(message.to_owned()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// An `application/json` answer.
pub(crate) fn json(status: StatusCode, value: &impl serde::Serialize) -> Resp {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut resp = Response::new(ResponseBody::full(body));
            *resp.status_mut() = status;
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("could not encode the answer: {e}\n"),
        ),
    }
}

fn method_not_allowed(allow: &'static str) -> Resp {
    let mut resp = text(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("method not allowed here; use {allow}\n"),
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// The first value of query parameter `name`; an empty value counts as absent.
pub(crate) fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    let query = uri.query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
}

/// Parses query parameter `name` as a number at least `min`; `Err` says why not.
pub(crate) fn number_param(uri: &http::Uri, name: &str, min: u64) -> Result<Option<u64>, String> {
    let Some(raw) = query_param(uri, name) else {
        return Ok(None);
    };
    match raw.parse::<u64>() {
        Ok(n) if n >= min => Ok(Some(n)),
        _ => Err(format!(
            "{name}=\"{}\" is not valid; use a whole number of at least {min}\n",
            Excerpt::new(&raw)
        )),
    }
}

/// A 400 saying `message`.
pub(crate) fn bad_request(message: &str) -> Resp {
    text(StatusCode::BAD_REQUEST, message)
}
