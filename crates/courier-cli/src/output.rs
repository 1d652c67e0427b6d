//! Writing to stdout: a reader that went away (`courier paginate URL | head`) ends the run
//! quietly; any other write failure is an error.

use std::io::{self, Write};
use std::process::ExitCode;

/// Writes `bytes` (and flushes when `bytes` is empty). `Err` carries the exit status to end
/// with: success when the reader closed the pipe, failure otherwise.
pub(crate) fn write_or_quit(out: &mut impl Write, bytes: &[u8]) -> Result<(), ExitCode> {
    let result = if bytes.is_empty() {
        out.flush()
    } else {
        out.write_all(bytes)
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(ExitCode::SUCCESS),
        Err(e) => {
            say!("error: cannot write to stdout: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Closed(io::ErrorKind);

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(self.0.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(self.0.into())
        }
    }

    #[test]
    fn a_closed_pipe_ends_quietly_and_other_failures_do_not() {
        assert_eq!(
            write_or_quit(&mut Closed(io::ErrorKind::BrokenPipe), b"x"),
            Err(ExitCode::SUCCESS)
        );
        assert_eq!(
            write_or_quit(&mut Closed(io::ErrorKind::StorageFull), b""),
            Err(ExitCode::FAILURE)
        );
        let mut buf = Vec::new();
        assert_eq!(write_or_quit(&mut buf, b"abc"), Ok(()));
        assert_eq!(buf, b"abc");
    }
}
