//! ASCII case eight bytes at a time, for the host keys built on every request.

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

/// Whether `bytes` holds an ASCII capital.
#[inline]
pub(crate) fn has_uppercase(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    let mut found = 0;
    for word in &mut words {
        found |= uppercase_mask(u64::from_ne_bytes(
            <[u8; 8]>::try_from(word).unwrap_or_default(),
        ));
    }
    found != 0 || words.remainder().iter().any(u8::is_ascii_uppercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_capital_wherever_it_is() {
        for len in 0..20 {
            for at in 0..len {
                for b in 0..=255_u8 {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = b;
                    assert_eq!(has_uppercase(&bytes), b.is_ascii_uppercase(), "{bytes:?}");
                }
            }
            assert!(!has_uppercase(&vec![b'z'; len]));
        }
    }
}
