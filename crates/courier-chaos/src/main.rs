//! `courier-chaos`: a soak of courier's preset under random faults.
//!
//! Many callers share one preset (deadline, cache, retry, circuit breaker, attempt timeout)
//! over one transport, a quarter of them the same preset with hedging (below), and send
//! random calls to fault servers on loopback: every method, half the POSTs and PATCHes with an
//! `Idempotency-Key`, each call with a random plan (5xx, 429 and 503 with `Retry-After` in
//! every form, quota headers, resets, slow headers, dripped bodies, unasked 304s, bodies cut
//! short), and one call in ten dropped by its caller at a random moment. The fault server
//! records every attempt; from those records the soak checks:
//!
//! - (a) no POST or PATCH without a key reaches the server twice;
//! - (b) every attempt of a keyed call carries the caller's key;
//! - (c) no call, headers and body, returns later than its deadline plus 100 ms;
//! - (d) nothing panics, in courier or in the server;
//! - (e) resident memory stays flat after the warm-up (the slope is reported);
//! - (f) after the chaos, each host answers a healthy plan through each stack within the
//!   breaker's open duration plus 5 s;
//! - (g) the retries the server sees from the callers without hedging stay within the retry
//!   budget (the load per call is reported overall and for plans that answer only 5xx);
//! - (h) no attempt reaches the server after its call returned or was dropped;
//! - (i) in the broken-paths mix, the breaker refuses under 1 % of the calls to paths that
//!   answer, for the callers with hedging and for those without;
//! - (j) the callers with hedging add no more requests per host, retries and hedges as the
//!   server counts them, than their retry budget and their hedge budget allow together;
//! - (k) the callers with hedging sent hedges, once they made calls enough for a host's delay
//!   to be learned;
//! - (l) once every call has ended, neither stack's concurrency limit still holds a permit.
//!
//! Two mixes run one after the other. The chaos mix: the faults above, and every host down
//! now and then, through a preset with a breaker scaled to those short outages. The
//! broken-paths mix: the preset's defaults (only the deadline, attempt timeout and cache
//! scaled), one host, every call its own path; one path in six resets or stalls past the
//! attempt timeout on every attempt, the others answer. The host is up all along, so a call
//! to an answering path that the breaker refuses was refused for nothing. Both report the
//! share of those refusals; the broken-paths mix fails over 1 %.
//!
//! # Hedging in part of the run
//!
//! In each mix a quarter of the callers (`--hedged-callers`, 8 of 32) go through the mix's
//! preset with `.hedge(HedgeLayer::new())`, the defaults a user gets (after each host's 95th
//! percentile latency, two requests at most, 10 % per host): the preset's retry service hedges
//! its own attempts, and each hedge passes the breaker, pacing, the concurrency limit and the
//! attempt timeout like any attempt. The other
//! callers go through the preset as it is. Why so:
//!
//! - Side by side, not one half of the run after the other: both parts meet the same faults,
//!   outages and recovery at the same moments, so their figures compare, and memory is judged
//!   over one steady load rather than across a change of client halfway.
//! - A stack of their own, as a second client in the same process, sharing only the cache
//!   (whose size the memory check counts on): each part has its own retry budget, breaker,
//!   pacing and concurrency limit. So (g) still judges the callers without hedging against the
//!   retry budget alone, (j) judges the others against both of theirs, and neither part spends
//!   the other's budget or trips the other's breaker.
//! - A quarter: enough calls for every host to learn its delay (some two hundred per host in
//!   each 10 s window of the chaos mix, eight hundred in the broken-paths mix, against the 20
//!   answers a delay is learned from) and for the bound of (j) to be judged per host, while
//!   three quarters keep the soak's load and figures close to those of runs before hedging.
//!   The run's length, and so CI's time, does not change.
//!
//! Every invariant is checked on each call whichever part it belongs to: a hedge must keep
//! the deadline (c) and the key (b), send nothing after its call ended (h), and a keyless POST
//! or PATCH is never hedged (a). The summary shows each part's outcomes, load per plan kind and
//! latency of the calls that succeeded, and for the callers with hedging the hedges their
//! answers carry (the `Hedged` extension: only the last attempt's, and only on an answer, so
//! fewer than went) and their load per host against the bound of (j). `--hedged-callers 0`
//! runs without hedging.
//!
//! The cache keeps its entries in memory, or with `--store disk` in a `DiskStore` of the same
//! size (a directory of its own, removed after the run): the same invariants hold over either.
//!
//! It prints a summary table per transport and exits with status 1 when any invariant broke.
//!
//! ```text
//! cargo run -p courier-chaos --release -- --transport both --seconds 60
//! cargo run -p courier-chaos --release -- --transport hyper --seconds 600 --seed 7
//! cargo run -p courier-chaos --release -- --transport reqwest --store disk --seconds 60
//! ```

mod bounds;
mod check;
mod lag;
mod memory;
mod report;
mod scenario;
mod servers;
mod soak;

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use clap::{Parser, ValueEnum};

use crate::check::Invariant;
use crate::scenario::Mix;
use crate::soak::{Config, Presets, Transport};

/// A soak of the courier preset under random faults, checked from the server's records.
#[derive(Debug, Parser)]
#[command(name = "courier-chaos")]
struct Args {
    /// Which transport carries the preset; `both` runs one after the other.
    #[arg(long, value_enum, default_value_t = Which::Both)]
    transport: Which,
    /// How long callers keep starting calls, per transport.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The most calls started per transport.
    #[arg(long, default_value_t = u64::MAX)]
    calls: u64,
    /// How many calls are in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// How many of the callers go through the preset with hedging (`HedgeLayer::new()`), the
    /// others through the same preset without; a quarter of them when absent, 0 for none.
    #[arg(long)]
    hedged_callers: Option<usize>,
    /// Seeds the plans (and the retry jitter); a random one when absent, printed either way.
    #[arg(long)]
    seed: Option<u64>,
    /// How many fault servers, each its own host to the preset (the chaos mix; the
    /// broken-paths mix calls one).
    #[arg(long, default_value_t = 4)]
    hosts: usize,
    /// Which faults: the chaos mix, the broken-paths mix, or both, one after the other.
    #[arg(long, value_enum, default_value_t = Mixes::Both)]
    mix: Mixes,
    /// Where the cache keeps its entries: in memory, or on disk (a `DiskStore` in a directory
    /// of its own under the system's temporary directory, removed after the run).
    #[arg(long, value_enum, default_value_t = Store::Memory)]
    store: Store,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Store {
    Memory,
    Disk,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mixes {
    Chaos,
    BrokenPaths,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Hyper,
    Reqwest,
    Both,
}

/// Panics anywhere in the process, and the first messages.
static PANICS: AtomicU64 = AtomicU64::new(0);
static PANIC_MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn count_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        let mut messages = PANIC_MESSAGES.lock().unwrap_or_else(|p| p.into_inner());
        if messages.len() < 5 {
            messages.push(info.to_string().replace('\n', " "));
        }
        drop(messages);
        report(info);
    }));
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.concurrency == 0 || args.hosts == 0 {
        eprintln!("chaos: --concurrency and --hosts must be at least 1");
        return ExitCode::from(2);
    }
    let hedged_callers = args
        .hedged_callers
        .unwrap_or_else(|| (args.concurrency as f64 * soak::HEDGED_SHARE).round() as usize);
    if hedged_callers > args.concurrency {
        eprintln!("chaos: --hedged-callers must be at most --concurrency");
        return ExitCode::from(2);
    }
    count_panics();
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let transports = match args.transport {
        Which::Hyper => vec![Transport::Hyper],
        Which::Reqwest => vec![Transport::Reqwest],
        Which::Both => vec![Transport::Hyper, Transport::Reqwest],
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chaos: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mixes = match args.mix {
        Mixes::Chaos => vec![Mix::Chaos],
        Mixes::BrokenPaths => vec![Mix::BrokenPaths],
        Mixes::Both => vec![Mix::Chaos, Mix::BrokenPaths],
    };
    let mut passed = true;
    for (transport, mix) in transports
        .iter()
        .flat_map(|t| mixes.iter().map(move |m| (*t, *m)))
    {
        let disk = (args.store == Store::Disk).then(|| {
            std::env::temp_dir().join(format!(
                "courier-chaos-{}-{}-{}",
                std::process::id(),
                transport.name(),
                mix.name()
            ))
        });
        let cache = match soak::cache(disk.as_deref()) {
            Ok(cache) => cache,
            Err(e) => {
                eprintln!("chaos: cannot open the disk store: {e}");
                return ExitCode::FAILURE;
            }
        };
        let hosts = match mix {
            Mix::Chaos => args.hosts,
            Mix::BrokenPaths => 1,
        };
        let presets = Presets::of(mix, seed, cache);
        let config = Config {
            transport,
            mix,
            duration: Duration::from_secs(args.seconds),
            max_calls: args.calls,
            concurrency: args.concurrency,
            seed,
            hosts,
            hedged_callers,
        };
        eprintln!(
            "chaos: {} mix over {} for {} s, {} callers ({hedged_callers} with hedging), seed {seed}",
            mix.name(),
            transport.name(),
            args.seconds,
            args.concurrency
        );
        let panics_before = PANICS.load(Ordering::SeqCst);
        let mut report = match runtime.block_on(soak::run(config, &presets)) {
            Ok(report) => report,
            Err(e) => {
                eprintln!(
                    "chaos: the soak over {} could not run: {e}",
                    transport.name()
                );
                passed = false;
                continue;
            }
        };
        let panics = PANICS.load(Ordering::SeqCst) - panics_before;
        let messages =
            std::mem::take(&mut *PANIC_MESSAGES.lock().unwrap_or_else(|p| p.into_inner()));
        for n in 0..panics {
            let message = messages
                .get(n as usize)
                .map_or("(message not kept)", String::as_str);
            report.tally.violate(Invariant::NoPanic, message);
        }
        drop(presets);
        if let Some(dir) = &disk {
            let _ = std::fs::remove_dir_all(dir);
        }
        println!("{}", report::render(&report));
        passed &= report.tally.passed();
    }
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
