//! The criterion tables of `BENCHMARKS.md` (sections 1 to 5), printed by the `layers` bench
//! after criterion has run: each figure is criterion's estimate (and its 95 % interval) read
//! back from the `estimates.json` it writes for every benchmark.

use crate::happy;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// One benchmark's time per iteration, in nanoseconds: criterion's typical estimate (the slope
/// when it sampled linearly, else the mean) and its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Lower bound of the interval.
    pub low: f64,
    /// The estimate.
    pub mid: f64,
    /// Upper bound of the interval.
    pub high: f64,
}

/// Reads the estimate of benchmark `name` of `group` under criterion's output directory
/// `criterion_dir` (`target/criterion`); `None` when it has not run (filtered out).
pub fn read_estimate(criterion_dir: &Path, group: &str, name: &str) -> Option<Estimate> {
    let path = criterion_dir
        .join(dir_name(group))
        .join(dir_name(name))
        .join("new")
        .join("estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let typical = json
        .get("slope")
        .filter(|s| !s.is_null())
        .or(json.get("mean"))?;
    let bound = |key: &str| typical["confidence_interval"][key].as_f64();
    Some(Estimate {
        low: bound("lower_bound")?,
        mid: typical["point_estimate"].as_f64()?,
        high: bound("upper_bound")?,
    })
}

/// The folder criterion names after a group or benchmark: the characters some file systems
/// refuse become `_`, and the name is cut at 64 bytes.
fn dir_name(name: &str) -> String {
    let mut safe = name.replace(['?', '"', '/', '\\', '*', '<', '>', ':', '|', '^'], "_");
    let mut end = safe.len().min(64);
    while !safe.is_char_boundary(end) {
        end -= 1;
    }
    safe.truncate(end);
    safe
}

/// `61 ns`, `1.04 µs`.
pub fn time(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else {
        format!("{ns:.0} ns")
    }
}

/// The happy-path table: each variant's time, what it adds over its base (the bare
/// `service_fn`, or the inner service that yields once), and the ratio to its best peer's
/// added cost. `times` holds the variants that ran, in order.
pub fn happy_table(times: &[(&str, Estimate)]) -> String {
    let by_name: HashMap<&str, f64> = times.iter().map(|(n, e)| (*n, e.mid)).collect();
    let added = |name: &str| -> Option<f64> {
        let base = by_name.get(happy::base_of(name))?;
        Some(by_name.get(name)? - base)
    };
    let mut out = String::from(
        "| variant | time per call | added over bare | best peer, added | courier added / peer added |\n\
         | --- | ---: | ---: | --- | ---: |\n",
    );
    for (name, e) in times {
        let own = added(name).map_or_else(|| "?".to_owned(), |a| time(a.max(0.0)));
        let own = if happy::base_of(name) == *name {
            "0".to_owned()
        } else {
            own
        };
        let peer = happy::best_peer(name).and_then(|p| Some((p, added(p)?)));
        let (peer, ratio) = match (peer, added(name)) {
            (Some((p, pa)), Some(a)) => (format!("{p}: {}", time(pa)), format!("{:.2}", a / pa)),
            _ => (String::new(), String::new()),
        };
        let _ = writeln!(
            out,
            "| {name} | {} | {own} | {peer} | {ratio} |",
            time(e.mid)
        );
    }
    out
}

/// One courier layer held against its floor and its peer, in nanoseconds added over the base.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRow {
    /// The courier variant.
    pub name: String,
    /// What it adds.
    pub added: f64,
    /// Its floor's name and added cost, when it has one and it ran.
    pub floor: Option<(String, f64)>,
    /// Its peer's name and added cost, when it has one and it ran.
    pub peer: Option<(String, f64)>,
}

/// The courier variants of `times` that have a floor or a peer ([`happy::floor_of`],
/// [`happy::best_peer`]), in order, without the variants whose inner future yields once.
pub fn layer_rows(times: &[(&str, Estimate)]) -> Vec<LayerRow> {
    let by_name: HashMap<&str, f64> = times.iter().map(|(n, e)| (*n, e.mid)).collect();
    let added = |name: &str| -> Option<f64> {
        let base = by_name.get(happy::base_of(name))?;
        Some((by_name.get(name)? - base).max(0.0))
    };
    let named = |other: Option<&str>| {
        let other = other?;
        Some((other.to_owned(), added(other)?))
    };
    times
        .iter()
        .filter(|(name, _)| name.starts_with("courier ") && !name.contains("yields once"))
        .filter_map(|(name, _)| {
            let row = LayerRow {
                name: (*name).to_owned(),
                added: added(name)?,
                floor: named(happy::floor_of(name)),
                peer: named(happy::best_peer(name)),
            };
            (row.floor.is_some() || row.peer.is_some()).then_some(row)
        })
        .collect()
}

/// The per-layer table: what each courier layer adds, its floor's and its peer's added cost,
/// and the two ratios (goals: within 1.25x of the floor, at or below the peer).
pub fn layer_table(rows: &[LayerRow]) -> String {
    let mut out = String::from(
        "| courier | added | floor | floor added | x floor | peer | peer added | x peer |\n\
         | --- | ---: | --- | ---: | ---: | --- | ---: | ---: |\n",
    );
    let side = |other: &Option<(String, f64)>, own: f64| match other {
        Some((name, a)) => (name.clone(), time(*a), format!("{:.2}", own / a.max(1.0))),
        None => ("none".to_owned(), String::new(), String::new()),
    };
    for row in rows {
        let (floor, floor_added, x_floor) = side(&row.floor, row.added);
        let (peer, peer_added, x_peer) = side(&row.peer, row.added);
        let _ = writeln!(
            out,
            "| {} | {} | {floor} | {floor_added} | {x_floor} | {peer} | {peer_added} | {x_peer} |",
            row.name,
            time(row.added)
        );
    }
    out
}

/// A group's table: each benchmark's time with its interval, and its ratio to the first row.
pub fn group_table(group: &str, ratio_to: &str, times: &[(&str, Estimate)]) -> String {
    let mut out =
        format!("| {group} | time (low, mid, high) | {ratio_to} |\n| --- | ---: | ---: |\n");
    let Some((_, first)) = times.first() else {
        return out;
    };
    for (name, e) in times {
        let _ = writeln!(
            out,
            "| {name} | {} ({} to {}) | {:.2} |",
            time(e.mid),
            time(e.low),
            time(e.high),
            e.mid / first.mid
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(mid: f64) -> Estimate {
        Estimate {
            low: mid - 1.0,
            mid,
            high: mid + 1.0,
        }
    }

    #[test]
    fn happy_table_counts_from_each_base_and_divides_by_the_peer() {
        let table = happy_table(&[
            (happy::BARE, at(60.0)),
            ("courier deadline", at(160.0)),
            ("tower timeout", at(100.0)),
            ("inner yields once", at(50.0)),
            ("tower timeout, inner yields once", at(550.0)),
            ("courier deadline, inner yields once", at(1050.0)),
        ]);
        assert!(
            table.contains("| bare service_fn | 60 ns | 0 |  |  |"),
            "{table}"
        );
        assert!(
            table.contains("| courier deadline | 160 ns | 100 ns | tower timeout: 40 ns | 2.50 |"),
            "{table}"
        );
        assert!(
            table.contains(
                "| courier deadline, inner yields once | 1.05 µs | 1.00 µs | \
                 tower timeout, inner yields once: 500 ns | 2.00 |"
            ),
            "{table}"
        );
    }

    #[test]
    fn layer_rows_hold_each_layer_against_its_floor_and_peer() {
        let rows = layer_rows(&[
            (happy::BARE, at(60.0)),
            ("courier deadline", at(160.0)),
            ("floor deadline (extension only)", at(110.0)),
            ("tower timeout", at(100.0)),
            ("courier cache (hit)", at(400.0)),
            ("courier adaptive pacing (healthy host)", at(90.0)),
            ("floor bucket (per host)", at(80.0)),
        ]);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].added, 100.0);
        assert_eq!(
            rows[0].floor,
            Some(("floor deadline (extension only)".to_owned(), 50.0))
        );
        assert_eq!(rows[0].peer, Some(("tower timeout".to_owned(), 40.0)));
        assert_eq!(rows[1].name, "courier adaptive pacing (healthy host)");
        assert_eq!(
            rows[1].floor,
            Some(("floor bucket (per host)".to_owned(), 20.0))
        );
        assert_eq!(rows[1].peer, None, "no peer paces a host");
        let table = layer_table(&rows);
        assert!(
            table.contains(
                "| courier deadline | 100 ns | floor deadline (extension only) | 50 ns | 2.00 \
                 | tower timeout | 40 ns | 2.50 |"
            ),
            "{table}"
        );
        assert!(
            !table.contains("courier cache (hit)"),
            "no floor and its peer did not run: {table}"
        );
    }

    #[test]
    fn group_table_gives_ratios_to_the_first_row() {
        let table = group_table("g", "ratio", &[("a", at(40.0)), ("b", at(10.0))]);
        assert!(
            table.contains("| a | 40 ns (39 ns to 41 ns) | 1.00 |"),
            "{table}"
        );
        assert!(
            table.contains("| b | 10 ns (9 ns to 11 ns) | 0.25 |"),
            "{table}"
        );
    }

    #[test]
    fn reads_what_criterion_writes() {
        let dir = std::env::temp_dir().join(format!("courier-report-{}", std::process::id()));
        let bench = dir.join("g").join("a b (c)").join("new");
        std::fs::create_dir_all(&bench).unwrap();
        let interval = |lo: f64, mid: f64, hi: f64| {
            serde_json::json!({"confidence_interval": {"confidence_level": 0.95,
                "lower_bound": lo, "upper_bound": hi}, "point_estimate": mid, "standard_error": 0.1})
        };
        let linear =
            serde_json::json!({"mean": interval(1.0, 2.0, 3.0), "slope": interval(4.0, 5.0, 6.0)});
        std::fs::write(bench.join("estimates.json"), linear.to_string()).unwrap();
        assert_eq!(
            read_estimate(&dir, "g", "a b (c)"),
            Some(Estimate {
                low: 4.0,
                mid: 5.0,
                high: 6.0
            })
        );
        let flat = serde_json::json!({"mean": interval(1.0, 2.0, 3.0), "slope": null});
        std::fs::write(bench.join("estimates.json"), flat.to_string()).unwrap();
        assert_eq!(
            read_estimate(&dir, "g", "a b (c)"),
            Some(Estimate {
                low: 1.0,
                mid: 2.0,
                high: 3.0
            })
        );
        assert_eq!(read_estimate(&dir, "g", "missing"), None);
        let odd = dir.join("g").join("a_ b").join("new");
        std::fs::create_dir_all(&odd).unwrap();
        std::fs::write(odd.join("estimates.json"), flat.to_string()).unwrap();
        assert!(
            read_estimate(&dir, "g", "a: b").is_some(),
            "found where criterion writes it"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
