//! `--config FILE`: the preset's policies from a TOML file (`courier::config`), with the
//! environment's `COURIER_...` overrides and the command line's flags over its default
//! policy.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use courier::config::{Config, ConfigError, Dur, OrOff};

use crate::stack::StackArgs;

/// The largest configuration file read: rules for thousands of upstreams fit in far less.
pub(crate) const MAX_CONFIG_FILE: u64 = 1 << 20;

/// Options naming the configuration file.
#[derive(Debug, Clone, Args)]
pub(crate) struct ConfigArgs {
    /// Take the preset's policies from this TOML file: a default policy and rules per
    /// destination (see `courier::config`); COURIER_DEFAULT__... and COURIER_ROUTES__...
    /// variables override its fields (COURIER_DEFAULT__RETRY__ATTEMPTS=5). --retries, --deadline, --attempt-timeout,
    /// --max-wait and --rate/--burst, when given, replace the file's default policy's values.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

/// Reads `path` (at most [`MAX_CONFIG_FILE`] bytes), applies the environment's overrides and
/// then the flags of `flags` that set a layer, and checks the whole.
///
/// # Errors
///
/// A message naming the file, then one line per bad field, `path: message`.
pub(crate) fn load(path: &Path, flags: Option<&StackArgs>) -> Result<Config, String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_CONFIG_FILE + 1).read_to_string(&mut text))
        .map_err(|e| {
            format!(
                "cannot read {}: {e}; give a TOML file of the preset's policies",
                path.display()
            )
        })?;
    if text.len() as u64 > MAX_CONFIG_FILE {
        return Err(format!(
            "{} is larger than {} MiB, more than any configuration; give a TOML file of the \
             preset's policies",
            path.display(),
            MAX_CONFIG_FILE >> 20
        ));
    }
    let table = toml::de::DeTable::parse(&text).map_err(|mut e| {
        e.set_input(Some(&text));
        format!(
            "{} is not TOML: {}",
            path.display(),
            e.to_string().trim_end()
        )
    })?;
    let refused = |e: ConfigError| format!("{} is refused:\n{}", path.display(), lines(&e));
    let config = Config::from_deserializer(toml::Deserializer::from(table)).map_err(refused)?;
    let mut config = config.env_overrides(std::env::vars()).map_err(refused)?;
    if let Some(flags) = flags {
        flags.apply(&mut config);
    }
    config.validate().map_err(refused)?;
    Ok(config)
}

/// One line per bad field of `e`, `path: message`.
pub(crate) fn lines(e: &ConfigError) -> String {
    e.errors()
        .iter()
        .map(|field| {
            if field.path.is_empty() {
                // The environment's overrides: the fields' lines, each with its path.
                return field.message.clone();
            }
            // The message alone: toml adds a line naming the keys, which the path names.
            let message = field.message.lines().next().unwrap_or_default();
            format!("{}: {message}", field.path)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `config` with every policy's deadline shortened by `spent` (at least 1 ms left): the time a
/// request's body took to read counts against its call's budget.
pub(crate) fn less_spent(config: &Config, spent: Duration) -> Config {
    let cut = |d: Duration| Dur(d.saturating_sub(spent).max(Duration::from_millis(1)));
    let mut config = config.clone();
    config.default.deadline = match config.default.deadline {
        Some(OrOff::Off) => Some(OrOff::Off),
        Some(OrOff::On(d)) => Some(OrOff::On(cut(d.0))),
        None => Some(OrOff::On(cut(courier::preset::DEFAULT_DEADLINE))),
    };
    for route in &mut config.routes {
        if let Some(OrOff::On(d)) = &mut route.deadline {
            *d = cut(d.0);
        }
    }
    config
}
