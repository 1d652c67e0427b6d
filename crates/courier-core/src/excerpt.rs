//! Quoting untrusted input in a message: a bounded prefix, control characters escaped.
//!
//! An error that names the header, URL or line it refused helps the reader, but quoting it whole
//! turns a 100 kB URL into a 100 kB log line, and a value holding a CR-LF into a forged log
//! entry wherever stderr is collected. [`Excerpt`] shows at most [`MAX_CHARS`] characters of
//! the input, then `… (N bytes)` with the whole input's length, and escapes what a terminal or
//! a log reader would act on: ASCII controls and DEL, the C1 controls, and the Unicode line and
//! paragraph separators and bidirectional overrides. Every message that quotes what it was fed
//! (the CLI's, the batch's JSON lines, the library's `Display` texts) goes through it.
//!
//! ```
//! use courier_core::excerpt::Excerpt;
//!
//! assert_eq!(Excerpt::new("X-A: a\r\nInjected: 1").to_string(), "X-A: a\\r\\nInjected: 1");
//! let long = "a".repeat(100_000);
//! let shown = Excerpt::new(&long).to_string();
//! assert!(shown.ends_with("… (100000 bytes)"));
//! assert!(shown.len() < 300);
//! ```

use std::fmt::{self, Write as _};

/// How many characters of the input an [`Excerpt`] shows before it cuts.
pub const MAX_CHARS: usize = 200;

/// Input quoted for a message: at most [`MAX_CHARS`] characters, each control character
/// escaped (`\n`, `\r`, `\t`, `\0`, `\u{..}`); when cut, ` … (N bytes)` follows. Bytes that are
/// not UTF-8 (from [`Excerpt::bytes`]) show as `\x..`.
#[derive(Debug, Clone, Copy)]
pub struct Excerpt<'a> {
    input: Input<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Input<'a> {
    Text(&'a str),
    Bytes(&'a [u8]),
}

// === impl Excerpt ===

impl<'a> Excerpt<'a> {
    /// Quotes `text`.
    pub const fn new(text: &'a str) -> Self {
        Self {
            input: Input::Text(text),
        }
    }

    /// Quotes `bytes`, which need not be UTF-8.
    pub const fn bytes(bytes: &'a [u8]) -> Self {
        Self {
            input: Input::Bytes(bytes),
        }
    }

    fn len(&self) -> usize {
        match self.input {
            Input::Text(t) => t.len(),
            Input::Bytes(b) => b.len(),
        }
    }
}

/// Writes `c` as a reader may see it safely.
fn write_char(f: &mut fmt::Formatter<'_>, c: char) -> fmt::Result {
    match c {
        '\n' => f.write_str("\\n"),
        '\r' => f.write_str("\\r"),
        '\t' => f.write_str("\\t"),
        '\0' => f.write_str("\\0"),
        '\\' => f.write_str("\\\\"),
        c if needs_escape(c) => write!(f, "\\u{{{:x}}}", c as u32),
        c => f.write_char(c),
    }
}

/// Controls (C0, DEL, C1), line and paragraph separators, and the bidirectional controls that
/// reorder what a terminal shows.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}' | '\u{feff}'
        )
}

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = 0;
        let mut cut = false;
        match self.input {
            Input::Text(text) => {
                for c in text.chars() {
                    if shown == MAX_CHARS {
                        cut = true;
                        break;
                    }
                    write_char(f, c)?;
                    shown += 1;
                }
            }
            Input::Bytes(mut bytes) => {
                while !bytes.is_empty() {
                    if shown == MAX_CHARS {
                        cut = true;
                        break;
                    }
                    let (c, used) = decode_one(bytes);
                    match c {
                        Some(c) => write_char(f, c)?,
                        None => write!(f, "\\x{:02x}", bytes[0])?,
                    }
                    bytes = &bytes[used..];
                    shown += 1;
                }
            }
        }
        if cut {
            write!(f, " … ({} bytes)", self.len())?;
        }
        Ok(())
    }
}

/// The first character of `bytes` and its length, or `None` and 1 for a byte that does not
/// start a valid UTF-8 sequence.
fn decode_one(bytes: &[u8]) -> (Option<char>, usize) {
    let end = bytes.len().min(4);
    let head = match std::str::from_utf8(&bytes[..end]) {
        Ok(s) => s,
        Err(e) if e.valid_up_to() > 0 => {
            std::str::from_utf8(&bytes[..e.valid_up_to()]).expect("valid up to here")
        }
        Err(_) => return (None, 1),
    };
    let c = head.chars().next().expect("a non-empty valid prefix");
    (Some(c), c.len_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_plain_text_is_shown_as_it_is() {
        assert_eq!(Excerpt::new("http://h/a?b=1").to_string(), "http://h/a?b=1");
        assert_eq!(Excerpt::new("").to_string(), "");
    }

    #[test]
    fn controls_are_escaped() {
        assert_eq!(
            Excerpt::new("a\r\nb\tc\0d\x1be\u{7f}\u{85}\u{202e}\\").to_string(),
            "a\\r\\nb\\tc\\0d\\u{1b}e\\u{7f}\\u{85}\\u{202e}\\\\"
        );
    }

    #[test]
    fn long_input_is_cut_with_its_length() {
        let text = "é".repeat(1000);
        let shown = Excerpt::new(&text).to_string();
        assert_eq!(shown, format!("{} … (2000 bytes)", "é".repeat(MAX_CHARS)));
        let exact = "x".repeat(MAX_CHARS);
        assert_eq!(Excerpt::new(&exact).to_string(), exact, "nothing to cut");
    }

    #[test]
    fn bytes_that_are_not_utf8_show_as_hex() {
        assert_eq!(
            Excerpt::bytes(b"ok\xff\xfe\n").to_string(),
            "ok\\xff\\xfe\\n"
        );
        assert_eq!(Excerpt::bytes("né".as_bytes()).to_string(), "né");
        assert_eq!(
            Excerpt::bytes(b"\xe2\x82").to_string(),
            "\\xe2\\x82",
            "a cut sequence"
        );
    }

    proptest! {
        #[test]
        fn any_input_is_bounded_and_free_of_controls(s in any::<String>(), b in proptest::collection::vec(any::<u8>(), 0..2000)) {
            for shown in [Excerpt::new(&s).to_string(), Excerpt::bytes(&b).to_string()] {
                prop_assert!(!shown.chars().any(needs_escape), "{shown:?}");
                // 200 characters, each escaped to at most 10 bytes, and the length note.
                prop_assert!(shown.len() <= MAX_CHARS * 10 + 40, "{}", shown.len());
            }
            if s.chars().count() <= MAX_CHARS && !s.chars().any(|c| needs_escape(c) || c == '\\') {
                prop_assert_eq!(Excerpt::new(&s).to_string(), s);
            }
        }
    }
}
