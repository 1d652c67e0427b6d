//! The library half of the `courier` command line: what its demo runs and its tests check.
//!
//! - [`scenarios`]: the scenario table of docs/ARCHITECTURE.md, run through the preset over
//!   either transport against a fault server, attempts counted by the server. `courier demo`
//!   prints it; the crate's tests run it over hyper and over reqwest.
//!
//! # Features
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod scenarios;
