//! The preset's configuration as data, and rules per destination.
