//! Declares the `courier_loom` cfg.
//!
//! `--cfg loom` would also switch tokio, hyper-util and bytes into their own loom modes (which
//! need loom as their dev-dependency), so the loom model of this crate has a cfg of its own.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(courier_loom)");
}
