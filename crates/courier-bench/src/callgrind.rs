//! Instruction counts with callgrind, which stay the same when the machine is busy (wall-clock
//! timings do not): the workers that run a variant, and the driver that runs them under
//! valgrind and prints the tables (the `instructions` bench).
//!
//! Each variant runs twice, a few calls then many more, and the difference in instructions is
//! divided by the extra calls: first-call costs cancel out. A happy-path variant is counted
//! inside `measured_calls` alone, out of line, in a process that builds that variant alone
//! (the others' state would shape the heap its calls allocate from), and each count is the
//! least of three processes (`least_count`): so a variant's count stays put when others are
//! added beside it. Heap allocations are the calls into `malloc`, read from
//! `callgrind_annotate`'s caller tree.

use crate::happy;
use crate::server::{BODY, LoopbackServer};
use bytes::Bytes;
use courier::CourierLayer;
use courier::transport::hyper_client;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use tower::{Service, ServiceExt};

type Body = Full<Bytes>;

/// The loopback variants, in the order of the table: the raw hyper-util client, the preset
/// with every layer off (with and without its `User-Agent`), each layer alone, the preset (and
/// the preset called as `oneshot` on a clone per request, as the README calls it),
/// the preset called through one more `async fn` that hands back the answer with its URI (the
/// least a client of `courier::Client`'s shape adds), the preset as `oneshot` with each
/// request's URI made from the URL string as `courier::Client` makes it (what building the
/// request costs), `courier::Client` (the preset's
/// defaults over hyper-util, called with a URL string: `get`, `send`, `bytes`), the same
/// features built from peers, and the floor of the preset without its cache
/// ([`crate::floors::preset_floor`]).
pub const LOOPBACK_VARIANTS: [&str; 19] = [
    "raw",
    "bare",
    "bare_no_ua",
    "deadline",
    "attempt_timeout",
    "cache",
    "retry",
    "breaker",
    "concurrency",
    "preset",
    "preset_no_concurrency",
    "preset_oneshot",
    "preset_wrapped",
    "preset_from_str",
    "client",
    "peer",
    "preset_no_cache",
    "peer_no_cache",
    "floor_no_cache",
];

/// Runs happy-path variant `which` (an index into [`happy::variants`]) `iters` times.
///
/// # Panics
///
/// When there is no such variant, or a call leaves the happy path.
pub fn happy_calls(which: usize, iters: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _rt = rt.enter();
    // Only this variant is built: the others' state would shape the heap its calls use.
    let v = happy::variants()
        .into_iter()
        .nth(which)
        .unwrap_or_else(|| panic!("no variant {which}"));
    let name = v.name;
    eprintln!("happy:{which} is {name}");
    let mut call = v.build();
    let ok = measured_calls(&mut *call, iters);
    assert_eq!(ok, iters, "{name} left the happy path");
}

/// The function whose instructions a happy-path count is made of ([`MEASURED`]): `iters`
/// calls of `call`, and how many answered. Kept out of line, so that callgrind counts inside
/// it alone (`--toggle-collect`), not the start-up of the process, whose cost moves by
/// millions of instructions from one run to the next (hash seeds, the runtime and the variant
/// built, threads started), nor another thread.
#[inline(never)]
fn measured_calls(call: &mut dyn FnMut() -> bool, iters: u64) -> u64 {
    let mut ok = 0u64;
    for _ in 0..iters {
        ok += u64::from(black_box(call()));
    }
    ok
}

/// The name callgrind knows [`measured_calls`] by.
const MEASURED: &str = "courier_bench::callgrind::measured_calls";

fn request(uri: &Uri) -> Request<Body> {
    let mut req = Request::new(Body::default());
    *req.uri_mut() = uri.clone();
    req
}

fn layer(name: &str) -> Option<CourierLayer> {
    let bare = CourierLayer::bare();
    Some(match name {
        "preset" => CourierLayer::new(),
        "bare" => bare,
        "bare_no_ua" => bare.user_agent(None),
        "deadline" => bare.deadline(courier::preset::DEFAULT_DEADLINE),
        "attempt_timeout" => bare.attempt_timeout(courier::preset::DEFAULT_ATTEMPT_TIMEOUT),
        "cache" => bare.cache(courier::cache::EtagCacheLayer::new()),
        "retry" => bare.retry(courier::retry::RetryLayer::new()),
        "breaker" => bare.circuit_breaker(courier::breaker::CircuitBreakerLayer::new()),
        "concurrency" => bare.concurrency_limit(courier::preset::preset_concurrency_limit()),
        "preset_no_concurrency" => CourierLayer::new().concurrency_limit(None),
        "preset_oneshot" | "preset_wrapped" | "preset_from_str" => CourierLayer::new(),
        "preset_no_cache" => CourierLayer::new().cache(None),
        _ => return None,
    })
}

/// `n` requests one after the other through `svc`: how many answered with the whole body.
async fn calls<S, RB>(mut svc: S, uri: Uri, n: usize) -> usize
where
    S: Service<Request<Body>, Response = http::Response<RB>>,
    RB: http_body::Body,
{
    let mut ok = 0;
    for _ in 0..n {
        let Ok(ready) = svc.ready().await else { break };
        if let Ok(resp) = ready.call(request(&uri)).await {
            let body = resp.into_body().collect().await.ok();
            ok += usize::from(body.is_some_and(|c| c.to_bytes() == BODY));
        }
    }
    ok
}

/// `n` requests one after the other, each through a clone of `svc` (`oneshot`): how many
/// answered with the whole body.
async fn oneshot_calls<S, RB>(svc: S, uri: Uri, n: usize) -> usize
where
    S: Service<Request<Body>, Response = http::Response<RB>> + Clone,
    RB: http_body::Body,
{
    let mut ok = 0;
    for _ in 0..n {
        if let Ok(resp) = svc.clone().oneshot(request(&uri)).await {
            let body = resp.into_body().collect().await.ok();
            ok += usize::from(body.is_some_and(|c| c.to_bytes() == BODY));
        }
    }
    ok
}

/// `n` requests one after the other as [`oneshot_calls`] sends them, each built from the URL
/// string as `courier::Client` builds it: parsed as a `Url`, its scheme checked, its fragment
/// dropped, an `http::Uri` made from its text, and the `Url` kept until the answer is read.
async fn from_str_calls<S, RB>(svc: S, url: String, n: usize) -> usize
where
    S: Service<Request<Body>, Response = http::Response<RB>> + Clone,
    RB: http_body::Body,
{
    let mut ok = 0;
    for _ in 0..n {
        let Ok(mut parsed) = courier::client::Url::parse(&url) else {
            break;
        };
        if !matches!(parsed.scheme(), "http" | "https") {
            break;
        }
        parsed.set_fragment(None);
        let Ok(uri) = Uri::try_from(parsed.as_str()) else {
            break;
        };
        let mut req = Request::new(Body::default());
        *req.uri_mut() = uri;
        if let Ok(resp) = svc.clone().oneshot(req).await {
            let body = resp.into_body().collect().await.ok();
            ok += usize::from(body.is_some_and(|c| c.to_bytes() == BODY));
        }
        drop(parsed);
    }
    ok
}

/// An answer and the URI it came from: what a client of `courier::Client`'s shape hands back.
struct Wrapped<RB> {
    response: http::Response<RB>,
    uri: Uri,
}

/// `req` through a clone of `svc`, its answer handed back with its URI: one `async fn` more
/// than [`oneshot_calls`] makes per request.
async fn send_wrapped<S, RB>(svc: &S, req: Request<Body>) -> Result<Wrapped<RB>, S::Error>
where
    S: Service<Request<Body>, Response = http::Response<RB>> + Clone,
{
    let uri = req.uri().clone();
    let response = svc.clone().oneshot(req).await?;
    Ok(Wrapped { response, uri })
}

/// `n` requests one after the other through [`send_wrapped`]: how many answered with the
/// whole body from the URI asked.
async fn wrapped_calls<S, RB>(svc: S, uri: Uri, n: usize) -> usize
where
    S: Service<Request<Body>, Response = http::Response<RB>> + Clone,
    RB: http_body::Body,
{
    let mut ok = 0;
    for _ in 0..n {
        if let Ok(w) = send_wrapped(&svc, request(&uri)).await
            && w.uri == uri
        {
            let body = w.response.into_body().collect().await.ok();
            ok += usize::from(body.is_some_and(|c| c.to_bytes() == BODY));
        }
    }
    ok
}

/// `n` GETs of `url` one after the other through `client`, each read whole: how many answered
/// with [`BODY`].
async fn client_calls(client: courier::Client, url: String, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if let Ok(resp) = client.get(&url).send().await {
            ok += usize::from(resp.bytes().await.is_ok_and(|b| b == BODY));
        }
    }
    ok
}

/// `n` requests over loopback through `variant` (one of [`LOOPBACK_VARIANTS`]) from `tasks`
/// tasks. The server runs in the same process, so its share is the same for every variant and
/// cancels out in a difference.
///
/// # Panics
///
/// When `variant` is not one of them, the server cannot start or a request fails.
pub fn loopback_calls(variant: &str, n: usize, tasks: usize) {
    assert!(
        LOOPBACK_VARIANTS.contains(&variant),
        "no loopback variant {variant}; one of {LOOPBACK_VARIANTS:?}"
    );
    let tasks = tasks.max(1);
    let variant = variant.to_owned();
    let server = LoopbackServer::start().expect("the loopback server starts");
    let url = server.url("/v1/items");
    let uri: Uri = url.parse().expect("a valid uri");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let ok = rt.block_on(async move {
        let raw = hyper_client::<Body>();
        let stack = layer(&variant).map(|l| l.hyper::<Body>());
        let peer = (variant == "peer").then(|| crate::peer::stack(raw.clone(), None));
        let peer_no_cache =
            (variant == "peer_no_cache").then(|| crate::peer::stack_without_cache(raw.clone()));
        let floor = (variant == "floor_no_cache")
            .then(|| crate::floors::preset_floor(crate::floors::with_user_agent(raw.clone())));
        let client = (variant == "client").then(courier::Client::new);
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..tasks {
            let (raw, uri, per_task) = (raw.clone(), uri.clone(), n / tasks);
            if let Some(client) = &client {
                set.spawn(client_calls(client.clone(), url.clone(), per_task));
                continue;
            }
            if let Some(peer) = &peer_no_cache {
                set.spawn(calls(peer.clone(), uri, per_task));
                continue;
            }
            if let Some(floor) = &floor {
                set.spawn(calls(floor.clone(), uri, per_task));
                continue;
            }
            match (&stack, &peer) {
                (Some(stack), _) if variant == "preset_oneshot" => {
                    set.spawn(oneshot_calls(stack.clone(), uri, per_task))
                }
                (Some(stack), _) if variant == "preset_wrapped" => {
                    set.spawn(wrapped_calls(stack.clone(), uri, per_task))
                }
                (Some(stack), _) if variant == "preset_from_str" => {
                    set.spawn(from_str_calls(stack.clone(), url.clone(), per_task))
                }
                (Some(stack), _) => set.spawn(calls(stack.clone(), uri, per_task)),
                (None, Some(peer)) => set.spawn(calls(peer.clone(), uri, per_task)),
                (None, None) => set.spawn(async move {
                    let mut ok = 0;
                    for _ in 0..per_task {
                        if let Ok(resp) = raw.request(request(&uri)).await {
                            let body = resp.into_body().collect().await.ok();
                            ok += usize::from(body.is_some_and(|c| c.to_bytes() == BODY));
                        }
                    }
                    ok
                }),
            };
        }
        let mut ok = 0;
        while let Some(done) = set.join_next().await {
            ok += done.unwrap_or(0);
        }
        ok
    });
    assert_eq!(ok, n / tasks * tasks, "some requests failed");
}

/// The worker's variable: `happy:<index>:<calls>` or `loopback:<variant>:<requests>:<tasks>`.
pub const WORKER_VAR: &str = "COURIER_BENCH_WORKER";

/// Runs the worker `COURIER_BENCH_WORKER` names, if it names one; true when it did.
///
/// # Panics
///
/// When the variable is malformed, or the worker fails.
pub fn run_worker() -> bool {
    let Ok(spec) = std::env::var(WORKER_VAR) else {
        return false;
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let num = |i: usize| -> u64 {
        parts
            .get(i)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{WORKER_VAR}={spec}: a number expected at {i}"))
    };
    match parts.first() {
        Some(&"happy") => happy_calls(usize::try_from(num(1)).expect("an index"), num(2)),
        Some(&"loopback") => loopback_calls(
            parts.get(1).copied().unwrap_or("raw"),
            usize::try_from(num(2)).expect("a count"),
            usize::try_from(num(3)).expect("a count"),
        ),
        _ => panic!("{WORKER_VAR}={spec}: happy:.. or loopback:.. expected"),
    }
    true
}

/// Whether `valgrind` and `callgrind_annotate` can be run.
pub fn valgrind_available() -> bool {
    // `callgrind_annotate --version` exits with 255: found is enough.
    ["valgrind", "callgrind_annotate"]
        .iter()
        .all(|tool| Command::new(tool).arg("--version").output().is_ok())
}

/// Instructions and calls into `malloc` of one run of `exe` as the worker `spec`: for a
/// happy-path worker, inside [`measured_calls`] alone.
fn count(exe: &Path, spec: &str, out: &Path) -> Result<(u64, u64), String> {
    let mut valgrind = Command::new("valgrind");
    valgrind.arg("--tool=callgrind");
    if spec.starts_with("happy:") {
        valgrind.arg(format!("--toggle-collect={MEASURED}"));
    }
    let run = valgrind
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .env(WORKER_VAR, spec)
        .output()
        .map_err(|e| format!("valgrind: {e}"))?;
    let stderr = String::from_utf8_lossy(&run.stderr);
    if !run.status.success() {
        return Err(format!("{spec}: {stderr}"));
    }
    let instructions = collected(&stderr).ok_or_else(|| format!("{spec}: no count in {stderr}"))?;
    let annotated = Command::new("callgrind_annotate")
        .arg("--tree=caller")
        .arg(out)
        .output()
        .map_err(|e| format!("callgrind_annotate: {e}"))?;
    if !annotated.status.success() {
        return Err(format!(
            "{spec}: callgrind_annotate: {}",
            String::from_utf8_lossy(&annotated.stderr)
        ));
    }
    let mallocs = match malloc_calls(&String::from_utf8_lossy(&annotated.stdout)) {
        Some(calls) => calls,
        // Counted inside the calls alone, a variant that allocates nothing has no malloc line.
        None if spec.starts_with("happy:") => 0,
        None => {
            return Err(format!(
                "{spec}: no line for malloc in callgrind_annotate's output"
            ));
        }
    };
    Ok((instructions, mallocs))
}

/// How many times [`least_count`] runs a happy-path worker.
const RUNS: usize = 3;

/// The least of [`RUNS`] counts of the worker `spec`, and its calls into `malloc`. The same
/// binary's count is not always the same: some variants (the deadline's, for one) come out
/// in one of two counts from one process to the next, 10 to 15 % apart, as the allocator
/// takes its fast path or not (seen with address randomisation off too). The least is the
/// count of the fast path.
fn least_count(exe: &Path, spec: &str, out: &Path) -> Result<(u64, u64), String> {
    let mut least = count(exe, spec, out)?;
    for _ in 1..RUNS {
        least = least.min(count(exe, spec, out)?);
    }
    Ok(least)
}

/// valgrind's `==pid== Collected : N`.
fn collected(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find_map(|l| l.split_once("Collected : ")?.1.trim().parse().ok())
}

/// The calls into `malloc`: the `(Nx)` of every caller line (`  < `) above malloc's own line
/// (`  * `, the function `malloc` of whatever file) in `callgrind_annotate --tree=caller`
/// output; `None` when there is no such line (every whole process allocates at start-up, so
/// there its absence means the output is not what this reads; counted inside the measured
/// calls alone, it means none of them allocated).
pub fn malloc_calls(annotated: &str) -> Option<u64> {
    let mut calls = 0;
    for line in annotated.lines() {
        if line.contains("  * ") && line.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
            if line.contains(":malloc [") {
                return Some(calls);
            }
            calls = 0;
        } else if line.contains("  < ") {
            calls += times_called(line).unwrap_or(0);
        }
    }
    None
}

/// The `N` of a caller line's `(Nx)`, written `(1,234x)`: the last such group of the line.
fn times_called(line: &str) -> Option<u64> {
    let mut rest = line;
    while let Some(end) = rest.rfind("x)") {
        let start = rest[..end].rfind('(')? + 1;
        let digits = &rest[start..end];
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit() || b == b',') {
            return digits.replace(',', "").parse().ok();
        }
        rest = &rest[..end];
    }
    None
}

/// Per call: the difference between `base + extra` calls and `base` calls, over `extra`.
fn per_call(a: u64, b: u64, extra: u64) -> f64 {
    b.saturating_sub(a) as f64 / extra as f64
}

/// What [`tables`] counted.
#[derive(Debug)]
pub struct Counts {
    /// The two tables, in Markdown.
    pub tables: String,
    /// Each happy-path variant's instructions per call added over its base, in
    /// [`happy::variants`]'s order.
    pub added: Vec<(&'static str, f64)>,
}

/// The two tables, counted by running `exe` (a binary that calls [`run_worker`] first) under
/// callgrind: the happy path in process (instructions per call, added over its base,
/// allocations per call), and loopback end to end with 16 tasks (instructions per request,
/// client and server together, and added over the raw client).
///
/// # Errors
///
/// When valgrind fails on a variant.
pub fn tables(exe: &Path, extra: u64) -> Result<Counts, String> {
    let dir = TempDir::new()?;
    let out = dir.0.join("callgrind.out");
    let names: Vec<&'static str> = {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let _rt = rt.enter();
        happy::variants().iter().map(|v| v.name).collect()
    };
    let base = 1000;
    let mut table = String::from(
        "| variant | instructions per call | added over bare | allocations per call |\n\
         | --- | ---: | ---: | ---: |\n",
    );
    let mut per: Vec<(&str, f64)> = Vec::new();
    let mut added = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (ia, ma) = least_count(exe, &format!("happy:{i}:{base}"), &out)?;
        let (ib, mb) = least_count(exe, &format!("happy:{i}:{}", base + extra), &out)?;
        let instructions = per_call(ia, ib, extra);
        per.push((name, instructions));
        let from = per
            .iter()
            .find(|(n, _)| *n == happy::base_of(name))
            .map_or(instructions, |(_, b)| *b);
        let allocs = per_call(ma, mb, extra);
        added.push((*name, instructions - from));
        let _ = writeln!(
            table,
            "| {name} | {instructions:.0} | {:.0} | {:.1} |",
            instructions - from,
            if allocs < 0.05 { 0.0 } else { allocs }
        );
    }
    // One task repeats its count within a few instructions from process to process; 16 tasks
    // interleave differently in each (how many polls, wake-ups and batched writes a request
    // takes), and their counts move by several hundred.
    for tasks in [1, 16] {
        let label = if tasks == 1 { "1 task" } else { "16 tasks" };
        let _ = write!(
            table,
            "\n| loopback, {label} | instructions per request (client + server) | added over raw |\n\
             | --- | ---: | ---: |\n"
        );
        let mut raw = None;
        for variant in LOOPBACK_VARIANTS {
            let (a, _) = count(exe, &format!("loopback:{variant}:800:{tasks}"), &out)?;
            let (b, _) = count(exe, &format!("loopback:{variant}:4000:{tasks}"), &out)?;
            let instructions = per_call(a, b, 3200);
            let raw = *raw.get_or_insert(instructions);
            let _ = writeln!(
                table,
                "| {variant} | {instructions:.0} | {:.0} |",
                instructions - raw
            );
        }
    }
    Ok(Counts {
        tables: table,
        added,
    })
}

/// A folder of its own under the system's temporary one, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("courier-callgrind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_calls_into_malloc_from_the_caller_tree() {
        let annotated = "\
            1,000 (10.0%)  < src/a.rs:a (20x) [/bin/x]\n\
              500 ( 5.0%)  < src/b.rs:b (1,234x) [/bin/x]\n\
            9,000 (90.0%)  *  ./malloc/malloc.c:malloc [/lib/libc.so.6]\n";
        assert_eq!(malloc_calls(annotated), Some(1254));
        let other = "\
            1,000 (10.0%)  < src/a.rs:a (20x) [/bin/x]\n\
            2,000 (20.0%)  *  src/c.rs:c [/bin/x]\n\
              300 ( 3.0%)  < src/d.rs:d (3x) [/bin/x]\n\
            9,000 (90.0%)  *  ./malloc/malloc.c:malloc [/lib/libc.so.6]\n";
        assert_eq!(
            malloc_calls(other),
            Some(3),
            "only malloc's own callers count"
        );
        assert_eq!(malloc_calls("no malloc here"), None);
        assert_eq!(
            times_called("  300 ( 3.0%)  < src/e.rs:<f as g(x)>::h (1,002x) [/bin/x]"),
            Some(1002),
            "a symbol with `x)` in it"
        );
    }

    #[test]
    fn reads_valgrinds_count() {
        assert_eq!(
            collected("==12== Events    : Ir\n==12== Collected : 123456\n==12==\n"),
            Some(123_456)
        );
        assert_eq!(collected("nothing"), None);
    }
}
