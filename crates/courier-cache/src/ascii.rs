//! ASCII case eight bytes at a time, for the cache keys built and compared on every request.

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);

/// The high bit of each byte of `word` that is an ASCII capital (`A..=Z`), every other bit
/// clear.
#[inline]
const fn uppercase_mask(word: u64) -> u64 {
    // The low seven bits of each byte; the additions below cannot carry into the next byte.
    let low = word & !HIGH;
    let at_least_a = low + ONES * (0x80 - b'A' as u64);
    let above_z = low + ONES * (0x7f - b'Z' as u64);
    at_least_a & !above_z & !word & HIGH
}

/// `to_ascii_lowercase` on each byte of `word` (bytes outside `A..=Z` stay as they are).
#[inline]
pub(crate) const fn lowercase_word(word: u64) -> u64 {
    word | (uppercase_mask(word) >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowercasing_a_word_matches_std_for_every_byte_in_every_lane() {
        for lane in 0..8 {
            for b in 0..=255_u8 {
                let mut bytes = *b"aZ.9-Q\xffM";
                bytes[lane] = b;
                let want = u64::from_ne_bytes(bytes.map(|c| c.to_ascii_lowercase()));
                assert_eq!(lowercase_word(u64::from_ne_bytes(bytes)), want, "{bytes:?}");
            }
        }
    }
}
