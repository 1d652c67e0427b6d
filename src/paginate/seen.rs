//! The pages and cursors a listing has used, remembered within a bound.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

/// The most recent pages (or cursors) a listing has used, to refuse one it is sent back to.
///
/// A look-up and an insert cost O(1) whatever the listing's length, and at most
/// [`Seen::CAPACITY`] entries are kept: past that the oldest is forgotten, so an endless
/// listing holds flat memory. A loop back to a page older than the last `CAPACITY` is not
/// caught; a bound on pages (`max_pages`, and the CLI's default) ends such a listing. It
/// serializes as the list of entries, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    order: VecDeque<Arc<str>>,
    set: HashSet<Arc<str>>,
}

// === impl Seen ===

impl Seen {
    /// How many entries are remembered: a loop shorter than this is refused.
    pub const CAPACITY: usize = 10_000;

    /// Whether `entry` is among those remembered.
    pub fn contains(&self, entry: &str) -> bool {
        self.set.contains(entry)
    }

    /// Remembers `entry` as the newest, forgetting the oldest past [`Seen::CAPACITY`]; an entry
    /// already there stays where it is.
    pub fn insert(&mut self, entry: &str) {
        if self.set.contains(entry) {
            return;
        }
        if self.order.len() == Self::CAPACITY
            && let Some(oldest) = self.order.pop_front()
        {
            self.set.remove(&oldest);
        }
        let entry: Arc<str> = Arc::from(entry);
        self.order.push_back(Arc::clone(&entry));
        self.set.insert(entry);
    }

    /// How many entries are remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The entry remembered last.
    pub fn newest(&self) -> Option<&str> {
        self.order.back().map(|e| &**e)
    }

    /// The entries, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(|e| &**e)
    }
}

impl Serialize for Seen {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Seen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = Vec::<String>::deserialize(deserializer)?;
        let mut seen = Self::default();
        for entry in &entries {
            seen.insert(entry);
        }
        Ok(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_is_forgotten_past_the_capacity() {
        let mut seen = Seen::default();
        for i in 0..Seen::CAPACITY + 5 {
            seen.insert(&i.to_string());
        }
        assert_eq!(seen.len(), Seen::CAPACITY);
        assert!(!seen.contains("0") && !seen.contains("4"));
        assert!(seen.contains("5") && seen.contains(&(Seen::CAPACITY + 4).to_string()));
        assert_eq!(seen.iter().next(), Some("5"));
    }

    #[test]
    fn it_round_trips_through_serde_in_order() {
        let mut seen = Seen::default();
        for e in ["b", "a", "b", "c"] {
            seen.insert(e);
        }
        let json = serde_json::to_string(&seen).unwrap();
        assert_eq!(json, r#"["b","a","c"]"#);
        let back: Seen = serde_json::from_str(&json).unwrap();
        assert_eq!(back, seen);
    }
}
