//! The body of `courier request -d`: given on the command line, or read from a file or stdin
//! while it is sent.
//!
//! A file or stdin is never read whole before the call. A regular file is opened up front (a
//! missing one is a usage error, and one larger than `--max-data` is refused before anything is
//! sent) and streamed with its length as `Content-Length`. Stdin, a pipe or a device is read
//! first up to [`KEPT`]: a body that ends within it is sent with its length, as curl does; one
//! that goes on is streamed after it (chunked), so `-d @/dev/zero` holds [`KEPT`] bytes, not
//! the stream. That first read and the stream both run under the call's deadline, and a body
//! that passes `--max-data` fails the call, never the process.
//!
//! The bytes sent are kept, up to [`KEPT`], so that a retry can send them again (through the
//! retry layer's `ReplayBody`): a body larger than that is sent once.

use std::fs::File;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use courier::retry::ReplayBody;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// The most of a body kept in memory: what a retry can send again, and what is read from
/// stdin before the call to learn its length.
pub(crate) const KEPT: usize = 8 << 20;

/// `--max-data` when it is not given: 1 GiB.
pub(crate) const DEFAULT_MAX_DATA: u64 = 1 << 30;

/// The body as the request sends it.
pub(crate) type RequestBody = ReplayBody<DataBody>;

/// Where `-d` takes the body from, checked before anything is sent.
#[derive(Debug)]
pub(crate) enum Source {
    /// The bytes given on the command line.
    Given(Bytes),
    /// A regular file of known length, opened.
    File {
        /// The path, as given.
        path: String,
        /// Its length when opened.
        len: u64,
        /// The file.
        file: File,
    },
    /// Stdin, a pipe or a device: its length is known once it ends.
    Stream {
        /// `stdin` or the path, for messages.
        name: String,
        /// What to read.
        reader: Option<File>,
    },
}

// === impl Source ===

impl Source {
    /// Opens `@path` (`-` for stdin); a regular file larger than `max` is refused.
    pub(crate) fn open(path: &str, max: u64) -> Result<Self, String> {
        if path == "-" {
            return Ok(Self::Stream {
                name: "stdin".to_owned(),
                reader: None,
            });
        }
        let file = File::open(path).map_err(|e| {
            format!(
                "cannot read the body from {path}: {e}; check the path, or send the text as \
                 given with --data-raw"
            )
        })?;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot read the body from {path}: {e}"))?;
        if meta.is_dir() {
            return Err(format!(
                "cannot read the body from {path}: it is a directory"
            ));
        }
        if !meta.is_file() {
            return Ok(Self::Stream {
                name: path.to_owned(),
                reader: Some(file),
            });
        }
        if meta.len() > max {
            return Err(format!(
                "{path} holds {} bytes, more than --max-data allows ({max} bytes); raise \
                 --max-data to send it",
                meta.len()
            ));
        }
        Ok(Self::File {
            path: path.to_owned(),
            len: meta.len(),
            file,
        })
    }

    /// What `--dry-run` says of the body; `None` for no body.
    pub(crate) fn describe(&self) -> Option<String> {
        match self {
            Self::Given(bytes) if bytes.is_empty() => None,
            Self::Given(bytes) => Some(format!("{} bytes", bytes.len())),
            Self::File { path, len, .. } => Some(format!("{len} bytes from {path}, streamed")),
            Self::Stream { name, .. } => {
                Some(format!("read from {name} as it is sent, up to --max-data"))
            }
        }
    }

    /// The body to send, reading a stream's first [`KEPT`] bytes now: run it under the call's
    /// deadline.
    pub(crate) async fn body(self, max: u64) -> Result<RequestBody, String> {
        let body = match self {
            Self::Given(bytes) => DataBody::given(bytes),
            Self::File { path, len, file } => DataBody {
                prefix: None,
                rest: Some(Box::pin(tokio::fs::File::from_std(file))),
                len: Some(len),
                sent: 0,
                max,
                name: path,
            },
            Self::Stream { name, reader } => {
                let mut reader: Pin<Box<dyn AsyncRead + Send + Sync>> = match reader {
                    Some(file) => Box::pin(tokio::fs::File::from_std(file)),
                    None => Box::pin(tokio::io::stdin()),
                };
                let mut first = Vec::new();
                (&mut reader)
                    .take(KEPT as u64 + 1)
                    .read_to_end(&mut first)
                    .await
                    .map_err(|e| format!("cannot read the body from {name}: {e}"))?;
                if first.len() as u64 > max {
                    return Err(format!(
                        "the body from {name} is longer than --max-data allows ({max} bytes)"
                    ));
                }
                if first.len() <= KEPT {
                    // It ended: sent with its length.
                    DataBody::given(first.into())
                } else {
                    DataBody {
                        sent: first.len() as u64,
                        prefix: Some(first.into()),
                        rest: Some(reader),
                        len: None,
                        max,
                        name,
                    }
                }
            }
        };
        Ok(ReplayBody::with_cap(body, KEPT))
    }
}

/// A request body: bytes first, then what a reader gives, at most `max` bytes in all.
pub(crate) struct DataBody {
    prefix: Option<Bytes>,
    rest: Option<Pin<Box<dyn AsyncRead + Send + Sync>>>,
    /// The exact length, when known: a file that ends early fails the body, one that grew is
    /// sent up to this length.
    len: Option<u64>,
    /// Bytes read so far (the prefix included).
    sent: u64,
    max: u64,
    name: String,
}

impl std::fmt::Debug for DataBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataBody")
            .field("name", &self.name)
            .field("len", &self.len)
            .field("sent", &self.sent)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

// === impl DataBody ===

impl DataBody {
    /// `bytes`, whole.
    pub(crate) fn given(bytes: Bytes) -> Self {
        Self {
            len: Some(bytes.len() as u64),
            sent: bytes.len() as u64,
            prefix: (!bytes.is_empty()).then_some(bytes),
            rest: None,
            max: u64::MAX,
            name: String::new(),
        }
    }
}

/// How much a stream is read at a time.
const CHUNK: usize = 64 << 10;

impl Body for DataBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if let Some(prefix) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        let Some(reader) = this.rest.as_mut() else {
            return Poll::Ready(None);
        };
        let want = match this.len {
            Some(len) => (len - this.sent).min(CHUNK as u64) as usize,
            None => CHUNK,
        };
        if want == 0 {
            this.rest = None;
            return Poll::Ready(None);
        }
        let mut chunk = BytesMut::zeroed(want);
        let mut buf = ReadBuf::new(&mut chunk);
        if let Err(e) = std::task::ready!(reader.as_mut().poll_read(cx, &mut buf)) {
            this.rest = None;
            return Poll::Ready(Some(Err(e)));
        }
        let n = buf.filled().len();
        if n == 0 {
            this.rest = None;
            return match this.len {
                Some(len) if this.sent < len => Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{} ended after {} of its {len} bytes: it changed while it was sent",
                        this.name, this.sent
                    ),
                )))),
                _ => Poll::Ready(None),
            };
        }
        this.sent += n as u64;
        if this.sent > this.max {
            this.rest = None;
            return Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!(
                    "the body from {} is longer than --max-data allows ({} bytes)",
                    this.name, this.max
                ),
            ))));
        }
        chunk.truncate(n);
        Poll::Ready(Some(Ok(Frame::data(chunk.freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && (self.rest.is_none() || self.len == Some(self.sent))
    }

    fn size_hint(&self) -> SizeHint {
        match self.len {
            Some(len) => SizeHint::with_exact(
                len - self.sent + self.prefix.as_ref().map_or(0, |p| p.len() as u64),
            ),
            None => {
                let mut hint = SizeHint::new();
                hint.set_lower(self.prefix.as_ref().map_or(0, |p| p.len() as u64));
                hint
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_file_is_streamed_with_its_length() {
        let dir = std::env::temp_dir().join(format!("courier-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("body.bin");
        let content: Vec<u8> = (0..200_000_u32).map(|i| i as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let source = Source::open(path.to_str().unwrap(), DEFAULT_MAX_DATA).unwrap();
        assert!(matches!(source, Source::File { len: 200_000, .. }));
        let body = source.body(DEFAULT_MAX_DATA).await.unwrap();
        assert_eq!(body.size_hint().exact(), Some(200_000));
        let got = body.collect().await.unwrap().to_bytes();
        assert_eq!(&got[..], &content[..]);

        let err = Source::open(path.to_str().unwrap(), 1000).unwrap_err();
        assert!(
            err.contains("more than --max-data allows (1000 bytes)"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn an_endless_device_fails_the_body_past_the_cap() {
        let source = Source::open("/dev/zero", 20 << 20).unwrap();
        assert!(matches!(source, Source::Stream { .. }));
        let mut body = source.body(20 << 20).await.unwrap();
        let mut read = 0_u64;
        let err = loop {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.into_data().map_or(0, |d| d.len() as u64),
                Some(Err(e)) => break e,
                None => panic!("/dev/zero ended"),
            }
        };
        assert!(err.to_string().contains("longer than --max-data"), "{err}");
        assert!(read <= 20 << 20, "{read}");
    }

    #[tokio::test]
    async fn given_bytes_are_one_frame() {
        let body = Source::Given(Bytes::from_static(b"hi"))
            .body(DEFAULT_MAX_DATA)
            .await
            .unwrap();
        assert_eq!(body.size_hint().exact(), Some(2));
        assert_eq!(body.collect().await.unwrap().to_bytes(), "hi");
        assert_eq!(Source::Given(Bytes::new()).describe(), None);
    }
}
