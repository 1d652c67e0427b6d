//! `courier-chaos`: a soak of courier's preset under random faults.
//!
//! Many callers share one preset (deadline, cache, retry, circuit breaker, attempt timeout)
//! over one transport and send random calls to fault servers on loopback: every method, half
//! the POSTs and PATCHes with an `Idempotency-Key`, each call with a random plan (5xx, 429 and
//! 503 with `Retry-After` in every form, quota headers, resets, slow headers, dripped bodies,
//! unasked 304s, bodies cut short), and one call in ten dropped by its caller at a random
//! moment. The fault server records every attempt; from those records the soak checks:
//!
//! - (a) no POST or PATCH without a key reaches the server twice;
//! - (b) every attempt of a keyed call carries the caller's key;
//! - (c) no call, headers and body, returns later than its deadline plus 100 ms;
//! - (d) nothing panics, in courier or in the server;
//! - (e) resident memory stays flat after the warm-up (the slope is reported);
//! - (f) after the chaos, each host answers a healthy plan within the breaker's open duration
//!   plus 5 s;
//! - (g) the retries the server sees stay within the retry budget (the load per call is
//!   reported overall and for plans that answer only 5xx);
//! - (h) no attempt reaches the server after its call returned or was dropped;
//! - (i) in the broken-paths mix, the breaker refuses under 1 % of the calls to paths that
//!   answer.
//!
//! Two mixes run one after the other. The chaos mix: the faults above, and every host down
//! now and then, through a preset with a breaker scaled to those short outages. The
//! broken-paths mix: the preset's defaults (only the deadline, attempt timeout and cache
//! scaled), one host, every call its own path; one path in six resets or stalls past the
//! attempt timeout on every attempt, the others answer. The host is up all along, so a call
//! to an answering path that the breaker refuses was refused for nothing. Both report the
//! share of those refusals; the broken-paths mix fails over 1 %.
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

mod check;
mod lag;
mod memory;
mod report;
mod scenario;
mod soak;

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use clap::{Parser, ValueEnum};

use crate::check::Invariant;
use crate::scenario::Mix;
use crate::soak::{Config, Transport};

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
        let (hosts, layer) = match mix {
            Mix::Chaos => (args.hosts, soak::preset(seed, cache)),
            Mix::BrokenPaths => (1, soak::defaults(seed, cache)),
        };
        let config = Config {
            transport,
            mix,
            duration: Duration::from_secs(args.seconds),
            max_calls: args.calls,
            concurrency: args.concurrency,
            seed,
            hosts,
        };
        eprintln!(
            "chaos: {} mix over {} for {} s, {} callers, seed {seed}",
            mix.name(),
            transport.name(),
            args.seconds,
            args.concurrency
        );
        let panics_before = PANICS.load(Ordering::SeqCst);
        let mut report = match runtime.block_on(soak::run(config, &layer)) {
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
        drop(layer);
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
