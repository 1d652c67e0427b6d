//! [`DiskStore`]: entries in files of their own, kept across restarts.

use crate::entry::{Entry, Variants};
use crate::service::TARGET;
use crate::store::{CacheStore, StoreFuture};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version, header};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs;
use std::future::ready;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The first bytes of every file: the format and its version.
const MAGIC: [u8; 8] = *b"courier\x01";

/// The fixed head of a file: [`MAGIC`], the payload's length, its checksum, and when it was
/// written (nanoseconds since the Unix epoch), each a little-endian `u64`.
const HEAD: usize = 32;

/// The suffix of an entry's file; its stem is the key's [`file_id`] in 16 hex digits.
const SUFFIX: &str = ".entry";

/// The suffix of a file being written, renamed to its final name once whole.
const TEMP_SUFFIX: &str = ".tmp";

/// A store that keeps every URI's variants in a file of its own under a directory, so that
/// entries outlive the process: a new store opened on the same directory serves them.
///
/// # Files
///
/// A file is written whole under a temporary name, then renamed over the entry's file: a
/// reader sees the old file or the new one, never part of one. Each file starts with a fixed
/// head that holds the length of what follows and a checksum of it, and the key it is for; a
/// file is checked whole each time it is read. One whose head is not this format's or whose
/// length is not the one announced (a truncated file) is removed when the store is opened; one
/// whose checksum, key, status, fields or `Content-Length` (against its body) do not check out
/// is never served, and removed when it is read. Files are not synced to the disk as they are
/// written: a crash may cost the latest entries, which the checks then remove.
///
/// # Bound
///
/// The files take at most `max_bytes` together: storing one more removes the oldest files
/// (by when they were written) until the rest fits, and a value whose file alone would be
/// larger is refused (what its key held stays, as in [`MemoryStore`](crate::MemoryStore)).
///
/// # Reads and writes
///
/// Writes and removals are applied by a thread of the store's own, in the order they were
/// made; until then the store answers from what it was handed, so that a read that follows a
/// write finds it. [`flush`](Self::flush) waits until they are on disk. Misses are answered
/// from an index in memory without touching the disk; a hit reads its file (on tokio's
/// blocking pool when there is a runtime).
///
/// Entries stored for requests with credentials are selected by a fingerprint that is seeded
/// per layer: only the layer that stored them finds them. One store per directory at a time:
/// two stores on one directory do not see each other's writes. Clones share the store.
#[derive(Clone)]
pub struct DiskStore {
    core: Arc<Core>,
    jobs: mpsc::Sender<Job>,
}

/// What the store and its writer thread share.
struct Core {
    dir: PathBuf,
    max_bytes: u64,
    index: Mutex<Index>,
}

/// What the store holds, in memory.
#[derive(Default)]
struct Index {
    /// The files on disk, by file id.
    files: HashMap<u64, Record>,
    /// File ids by the sequence number of their write: oldest first.
    order: BTreeMap<u64, u64>,
    /// The bytes of every file together.
    bytes: u64,
    /// The latest write or removal of each file id not yet applied.
    pending: HashMap<u64, Pending>,
    /// The sequence number of the next write or removal.
    next_seq: u64,
}

/// A file on disk.
struct Record {
    key: Box<str>,
    seq: u64,
    bytes: u64,
    /// When it was written, on tokio's clock, or when it was found in the directory.
    written: Instant,
    /// The time between its write and `written` (for a file written by an earlier process,
    /// read from the wall clock).
    extra: Duration,
}

/// A write (`Some`) or removal (`None`) not yet applied.
struct Pending {
    key: Box<str>,
    seq: u64,
    value: Option<Arc<Variants>>,
}

/// What the writer thread is asked to do.
enum Job {
    Write {
        id: u64,
        seq: u64,
        key: String,
        variants: Arc<Variants>,
        written: Instant,
    },
    Remove {
        id: u64,
        seq: u64,
    },
    /// A read found the file of this write corrupt.
    Discard {
        id: u64,
        seq: u64,
    },
    /// Answer once every job before it is applied.
    Flush(oneshot::Sender<()>),
}

// === impl DiskStore ===

impl DiskStore {
    /// A store over `dir` (made if missing) whose files take at most `max_bytes`.
    ///
    /// The files there are indexed, oldest first: leftover temporary files, and files whose
    /// head or length do not check out, are removed; files beyond `max_bytes` are removed from
    /// the oldest. Files of other names are left alone.
    pub fn open(dir: impl Into<PathBuf>, max_bytes: u64) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        let mut found = Vec::new();
        for item in fs::read_dir(&dir)? {
            let item = item?;
            let name = item.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            let path = item.path();
            if name.ends_with(TEMP_SUFFIX) {
                remove_file(&path, "temporary");
                continue;
            }
            let Some(id) = parse_file_name(name) else {
                continue;
            };
            match read_head(&path) {
                Ok((key, wall, bytes)) if file_id(&key) == id => found.push((wall, id, key, bytes)),
                Ok(_) => remove_file(&path, "misplaced"),
                Err(_) => remove_file(&path, "truncated or garbage"),
            }
        }
        found.sort_by_key(|&(wall, id, ..)| (wall, id));
        let now = Instant::now();
        let wall_now = SystemTime::now();
        let mut index = Index::default();
        for (wall, id, key, bytes) in found {
            let seq = index.next();
            let extra = wall_now.duration_since(wall).unwrap_or(Duration::ZERO);
            index.put(
                id,
                Record {
                    key: key.into(),
                    seq,
                    bytes,
                    written: now,
                    extra,
                },
            );
        }
        let core = Arc::new(Core {
            dir,
            max_bytes,
            index: Mutex::new(index),
        });
        let evicted = core.evict(&mut core.lock());
        core.remove_evicted(evicted);
        let (jobs, queue) = mpsc::channel();
        let writer = core.clone();
        std::thread::Builder::new()
            .name("courier-cache-disk".to_owned())
            .spawn(move || {
                for job in queue {
                    writer.apply(job);
                }
            })?;
        Ok(Self { core, jobs })
    }

    /// Waits until every write and removal made before it is applied to the files.
    pub async fn flush(&self) {
        let (done, applied) = oneshot::channel();
        if self.jobs.send(Job::Flush(done)).is_ok() {
            let _ = applied.await;
        }
    }

    /// The directory of the files.
    pub fn dir(&self) -> &Path {
        &self.core.dir
    }

    /// The most bytes the files take together.
    pub fn max_bytes(&self) -> u64 {
        self.core.max_bytes
    }

    /// Queues `job` made with sequence number `seq` for file `id`; when the writer is gone
    /// (it never is while the store lives), forgets it.
    fn send(&self, id: u64, seq: u64, job: Job) {
        if self.jobs.send(job).is_err() {
            let mut index = self.core.lock();
            if index.pending.get(&id).is_some_and(|p| p.seq == seq) {
                index.pending.remove(&id);
            }
        }
    }
}

impl fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let index = self.core.lock();
        f.debug_struct("DiskStore")
            .field("dir", &self.core.dir)
            .field("files", &index.files.len())
            .field("bytes", &index.bytes)
            .field("max_bytes", &self.core.max_bytes)
            .finish()
    }
}

impl CacheStore for DiskStore {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Arc<Variants>>> {
        let id = file_id(key);
        let index = self.core.lock();
        if let Some(pending) = index.pending.get(&id) {
            // Another key's file about to be written is no file of this one.
            let value = (*pending.key == *key)
                .then(|| pending.value.clone())
                .flatten();
            return Box::pin(ready(value));
        }
        let Some(record) = index.files.get(&id).filter(|r| *r.key == *key) else {
            return Box::pin(ready(None));
        };
        let (seq, written, extra) = (record.seq, record.written, record.extra);
        drop(index);
        let path = self.core.path(id);
        let owned = key.to_owned();
        let read = move || read_file(&path, &owned, written, extra);
        Box::pin(async move {
            let read = match tokio::runtime::Handle::try_current() {
                Ok(handle) => match handle.spawn_blocking(read).await {
                    Ok(read) => read,
                    Err(_) => return None,
                },
                Err(_) => read(),
            };
            match read {
                Ok(found) => found.map(Arc::new),
                Err(why) => {
                    tracing::debug!(target: TARGET, event = "corrupt", file = %self.core.path(id).display(), why, "a stored file failed its checks");
                    let _ = self.jobs.send(Job::Discard { id, seq });
                    None
                }
            }
        })
    }

    fn insert(&self, key: String, variants: Arc<Variants>) -> StoreFuture<'_, ()> {
        let bytes = encoded_len(&key, &variants);
        if bytes > self.core.max_bytes {
            tracing::debug!(target: TARGET, event = "refused", bytes, "an entry larger than the disk store's bound was not stored");
            return Box::pin(ready(()));
        }
        let id = file_id(&key);
        let seq = {
            let mut index = self.core.lock();
            let seq = index.next();
            index.pending.insert(
                id,
                Pending {
                    key: key.as_str().into(),
                    seq,
                    value: Some(variants.clone()),
                },
            );
            seq
        };
        let job = Job::Write {
            id,
            seq,
            key,
            variants,
            written: Instant::now(),
        };
        self.send(id, seq, job);
        Box::pin(ready(()))
    }

    fn remove<'a>(&'a self, key: &'a str) -> StoreFuture<'a, bool> {
        let id = file_id(key);
        let seq = {
            let mut index = self.core.lock();
            let held = match index.pending.get(&id) {
                Some(pending) => *pending.key == *key && pending.value.is_some(),
                None => index.files.get(&id).is_some_and(|r| *r.key == *key),
            };
            if !held {
                return Box::pin(ready(false));
            }
            let seq = index.next();
            index.pending.insert(
                id,
                Pending {
                    key: key.into(),
                    seq,
                    value: None,
                },
            );
            seq
        };
        self.send(id, seq, Job::Remove { id, seq });
        Box::pin(ready(true))
    }

    /// The bytes of the files on disk.
    fn weight(&self) -> u64 {
        self.core.lock().bytes
    }

    /// How many files are on disk.
    fn len(&self) -> usize {
        self.core.lock().files.len()
    }
}

// === impl Core ===

impl Core {
    fn lock(&self) -> MutexGuard<'_, Index> {
        // The index is consistent between any two statements that touch it.
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:016x}{SUFFIX}"))
    }

    /// Applies one job (on the writer thread).
    fn apply(&self, job: Job) {
        match job {
            Job::Write {
                id,
                seq,
                key,
                variants,
                written,
            } => self.write(id, seq, key, &variants, written),
            Job::Remove { id, seq } => {
                let taken = {
                    let mut index = self.lock();
                    index.clear_pending(id, seq);
                    index.take(id).is_some()
                };
                if taken {
                    remove_file(&self.path(id), "removed");
                }
            }
            Job::Discard { id, seq } => {
                let taken = {
                    let mut index = self.lock();
                    let current = index.files.get(&id).is_some_and(|r| r.seq == seq);
                    current && index.take(id).is_some()
                };
                if taken {
                    remove_file(&self.path(id), "failed its checks");
                }
            }
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
    }

    /// Writes one entry. Only this thread touches the files, so no file call is made under
    /// the index's lock: a slow disk stalls the writer, never a caller that reads the index.
    fn write(&self, id: u64, seq: u64, key: String, variants: &Variants, written: Instant) {
        let superseded = |index: &Index| index.pending.get(&id).is_none_or(|p| p.seq != seq);
        if superseded(&self.lock()) {
            // A later write or removal of this file follows.
            return;
        }
        let file = encode(&key, variants, written, SystemTime::now());
        let temp = self.dir.join(format!("{id:016x}.{seq}{TEMP_SUFFIX}"));
        if let Err(error) = fs::write(&temp, &file) {
            self.lock().clear_pending(id, seq);
            remove_file(&temp, "unwritten");
            tracing::warn!(target: TARGET, event = "write_failed", %error, "a disk store could not write an entry");
            return;
        }
        // Until the index records the file, readers are answered from the pending value.
        if let Err(error) = fs::rename(&temp, self.path(id)) {
            self.lock().clear_pending(id, seq);
            remove_file(&temp, "unrenamed");
            tracing::warn!(target: TARGET, event = "write_failed", %error, "a disk store could not write an entry");
            return;
        }
        let evicted = {
            let mut index = self.lock();
            // The file is on disk whatever came since: a later job for it finds it recorded.
            index.clear_pending(id, seq);
            index.put(
                id,
                Record {
                    key: key.into(),
                    seq,
                    bytes: file.len() as u64,
                    written,
                    extra: Duration::ZERO,
                },
            );
            self.evict(&mut index)
        };
        self.remove_evicted(evicted);
    }

    /// Forgets the oldest files until the rest fits, and returns them for
    /// [`remove_evicted`](Self::remove_evicted) to delete once the lock is released.
    fn evict(&self, index: &mut Index) -> Vec<u64> {
        let mut evicted = Vec::new();
        while index.bytes > self.max_bytes {
            let Some((_, id)) = index.order.pop_first() else {
                break;
            };
            if let Some(record) = index.files.remove(&id) {
                index.bytes = index.bytes.saturating_sub(record.bytes);
                tracing::debug!(target: TARGET, event = "evict", uri = %crate::key::loggable(&record.key), bytes = record.bytes, "disk store entry evicted");
            }
            evicted.push(id);
        }
        evicted
    }

    fn remove_evicted(&self, evicted: Vec<u64>) {
        for id in evicted {
            remove_file(&self.path(id), "evicted");
        }
    }
}

// === impl Index ===

impl Index {
    fn next(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Records the file `id`, in place of the one it replaces.
    fn put(&mut self, id: u64, record: Record) {
        self.take(id);
        self.order.insert(record.seq, id);
        self.bytes = self.bytes.saturating_add(record.bytes);
        self.files.insert(id, record);
    }

    /// Forgets the file `id`.
    fn take(&mut self, id: u64) -> Option<Record> {
        let record = self.files.remove(&id)?;
        self.order.remove(&record.seq);
        self.bytes = self.bytes.saturating_sub(record.bytes);
        Some(record)
    }

    /// Forgets the pending job `seq` of file `id`, unless a later one replaced it.
    fn clear_pending(&mut self, id: u64, seq: u64) {
        if self.pending.get(&id).is_some_and(|p| p.seq == seq) {
            self.pending.remove(&id);
        }
    }
}

fn remove_file(path: &Path, why: &str) {
    match fs::remove_file(path) {
        Ok(()) => {
            tracing::debug!(target: TARGET, event = "remove_file", file = %path.display(), why, "disk store file removed");
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(target: TARGET, event = "remove_failed", file = %path.display(), %error, "a disk store could not remove a file");
        }
    }
}

// === files ===

/// The id of `key`'s file: its 64-bit FNV-1a hash, the same in every process. Two keys with
/// one id share a file: the later write replaces the earlier, and each file names its key.
fn file_id(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn parse_file_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(SUFFIX)?;
    if stem.len() != 16 {
        return None;
    }
    u64::from_str_radix(stem, 16).ok()
}

/// A checksum of `parts`, a word at a time: a multiply and rotate per word, each step one to
/// one, so that any one changed word changes the result.
fn checksum(parts: &[&[u8]]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |hash: u64, word: u64| (hash ^ word).wrapping_mul(K).rotate_left(31);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        let mut words = part.chunks_exact(8);
        for word in &mut words {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(word);
            hash = step(hash, u64::from_le_bytes(bytes));
        }
        for &b in words.remainder() {
            hash = step(hash, u64::from(b));
        }
        hash = step(hash, part.len() as u64);
    }
    hash ^ (hash >> 29)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn version_code(version: Version) -> u8 {
    match version {
        Version::HTTP_09 => 0,
        Version::HTTP_10 => 1,
        Version::HTTP_2 => 3,
        Version::HTTP_3 => 4,
        _ => 2,
    }
}

fn version_of(code: u8) -> Option<Version> {
    Some(match code {
        0 => Version::HTTP_09,
        1 => Version::HTTP_10,
        2 => Version::HTTP_11,
        3 => Version::HTTP_2,
        4 => Version::HTTP_3,
        _ => return None,
    })
}

/// The file of `key`'s `variants`, written at `written` (tokio's clock) and `wall`: the head,
/// then the key, then each entry with its age at `written`.
fn encode(key: &str, variants: &Variants, written: Instant, wall: SystemTime) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD + key.len() + variants.weight() as usize);
    out.resize(HEAD, 0);
    put_bytes32(&mut out, key.as_bytes());
    put_u32(&mut out, variants.entries().len());
    for entry in variants.entries() {
        out.extend_from_slice(&entry.status.as_u16().to_le_bytes());
        out.push(version_code(entry.version));
        out.extend_from_slice(&entry.credentials.to_le_bytes());
        out.extend_from_slice(&nanos(entry.current_age(written)).to_le_bytes());
        match entry.lifetime {
            Some(lifetime) => {
                out.push(1);
                out.extend_from_slice(&nanos(lifetime).to_le_bytes());
            }
            None => {
                out.push(0);
                out.extend_from_slice(&0_u64.to_le_bytes());
            }
        }
        put_u32(&mut out, entry.headers.len());
        for (name, value) in &entry.headers {
            put_bytes32(&mut out, name.as_str().as_bytes());
            put_bytes32(&mut out, value.as_bytes());
        }
        put_u32(&mut out, entry.vary.len());
        for (name, value) in &entry.vary {
            put_bytes32(&mut out, name.as_str().as_bytes());
            match value {
                Some(value) => {
                    out.push(1);
                    put_bytes32(&mut out, value);
                }
                None => out.push(0),
            }
        }
        out.extend_from_slice(&(entry.body.len() as u64).to_le_bytes());
        out.extend_from_slice(&entry.body);
    }
    debug_assert_eq!(out.len() as u64, encoded_len(key, variants));
    let wall = nanos(wall.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)).to_le_bytes();
    let payload_len = (out.len() - HEAD) as u64;
    let sum = checksum(&[&wall, &out[HEAD..]]);
    out[..8].copy_from_slice(&MAGIC);
    out[8..16].copy_from_slice(&payload_len.to_le_bytes());
    out[16..24].copy_from_slice(&sum.to_le_bytes());
    out[24..32].copy_from_slice(&wall);
    out
}

/// The length of the file [`encode`] makes.
fn encoded_len(key: &str, variants: &Variants) -> u64 {
    // Status, version, credentials, age, lifetime; then the counts of fields and of `Vary`
    // values, and the body's length.
    const FIXED: usize = 2 + 1 + 8 + 8 + 1 + 8 + 4 + 4 + 8;
    let entries: usize = variants
        .entries()
        .iter()
        .map(|entry| {
            let fields: usize = entry
                .headers
                .iter()
                .map(|(name, value)| 8 + name.as_str().len() + value.len())
                .sum();
            let vary: usize = entry
                .vary
                .iter()
                .map(|(name, value)| {
                    4 + name.as_str().len() + 1 + value.as_ref().map_or(0, |v| 4 + v.len())
                })
                .sum();
            FIXED + fields + vary + entry.body.len()
        })
        .sum();
    (HEAD + 4 + key.len() + 4 + entries) as u64
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_bytes32(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// The head of a file: (magic, payload length, checksum, wall time), if it is this format's.
fn parse_head(head: &[u8]) -> Option<(u64, u64, SystemTime)> {
    let mut reader = Reader(head);
    if reader.take(8)? != MAGIC {
        return None;
    }
    let len = reader.u64()?;
    let sum = reader.u64()?;
    let wall = UNIX_EPOCH.checked_add(Duration::from_nanos(reader.u64()?))?;
    Some((len, sum, wall))
}

/// The key, wall time and size of the file at `path`, when its head is this format's and its
/// length the one it announces.
fn read_head(path: &Path) -> Result<(String, SystemTime, u64), &'static str> {
    let mut file = fs::File::open(path).map_err(|_| "unreadable")?;
    let size = file.metadata().map_err(|_| "unreadable")?.len();
    let mut head = [0; HEAD + 4];
    file.read_exact(&mut head).map_err(|_| "wrong length")?;
    let (len, _, wall) = parse_head(&head[..HEAD]).ok_or("not this format")?;
    if HEAD as u64 + len != size {
        return Err("wrong length");
    }
    let mut key_len = [0; 4];
    key_len.copy_from_slice(&head[HEAD..]);
    let key_len = u32::from_le_bytes(key_len);
    if u64::from(key_len) > len {
        return Err("garbage");
    }
    let mut key = vec![0; key_len as usize];
    file.read_exact(&mut key).map_err(|_| "wrong length")?;
    let key = String::from_utf8(key).map_err(|_| "garbage")?;
    Ok((key, wall, size))
}

/// The variants in the file at `path`, when it is `key`'s (`None` when it is another key's),
/// with ages counted from `written` plus `extra`; an error when it fails a check.
fn read_file(
    path: &Path,
    key: &str,
    written: Instant,
    extra: Duration,
) -> Result<Option<Variants>, &'static str> {
    let file = fs::read(path).map_err(|_| "unreadable")?;
    let (head, payload) = file.split_at_checked(HEAD).ok_or("wrong length")?;
    let (len, sum, _) = parse_head(head).ok_or("not this format")?;
    if payload.len() as u64 != len {
        return Err("wrong length");
    }
    if checksum(&[&head[24..32], payload]) != sum {
        return Err("checksum");
    }
    let mut reader = Reader(payload);
    if reader.bytes32().ok_or("garbage")? != key.as_bytes() {
        return Ok(None);
    }
    let variants = decode_entries(&mut reader, written, extra).ok_or("garbage")?;
    if !reader.0.is_empty() {
        return Err("garbage");
    }
    Ok(Some(variants))
}

fn decode_entries(reader: &mut Reader<'_>, written: Instant, extra: Duration) -> Option<Variants> {
    let count = reader.u32()?;
    let mut entries = Vec::new();
    for _ in 0..count {
        let status = StatusCode::from_u16(reader.u16()?).ok()?;
        let version = version_of(reader.u8()?)?;
        let credentials = reader.u64()?;
        let age = Duration::from_nanos(reader.u64()?).saturating_add(extra);
        let has_lifetime = reader.u8()?;
        let lifetime = Duration::from_nanos(reader.u64()?);
        let lifetime = match has_lifetime {
            0 => None,
            1 => Some(lifetime),
            _ => return None,
        };
        let mut headers = HeaderMap::new();
        for _ in 0..reader.u32()? {
            let name = HeaderName::from_bytes(reader.bytes32()?).ok()?;
            let value = HeaderValue::from_bytes(reader.bytes32()?).ok()?;
            headers.append(name, value);
        }
        let mut vary = Vec::new();
        for _ in 0..reader.u32()? {
            let name = HeaderName::from_bytes(reader.bytes32()?).ok()?;
            let value = match reader.u8()? {
                0 => None,
                1 => Some(reader.bytes32()?.to_vec()),
                _ => return None,
            };
            vary.push((name, value));
        }
        let body_len = usize::try_from(reader.u64()?).ok()?;
        let body = Bytes::copy_from_slice(reader.take(body_len)?);
        // The stored length, where there is one, is the body's.
        for value in headers.get_all(header::CONTENT_LENGTH) {
            if value.to_str().ok()?.trim().parse::<usize>().ok()? != body.len() {
                return None;
            }
        }
        entries.push(Arc::new(Entry::restore(
            status,
            version,
            headers,
            body,
            credentials,
            vary,
            lifetime,
            age,
            written,
        )));
    }
    Some(Variants::new(entries))
}

/// Reads little-endian fields off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(taken)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    fn bytes32(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u32()?).ok()?;
        self.take(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Timing;

    fn variants(headers: &[(&str, &str)], body: &'static str) -> Variants {
        let now = Instant::now();
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let entry = Entry::new(
            StatusCode::OK,
            Version::HTTP_11,
            map,
            Bytes::from_static(body.as_bytes()),
            7,
            vec![
                (header::ACCEPT, Some(b"text/plain".to_vec())),
                (header::COOKIE, None),
            ],
            Timing {
                request_time: now,
                response_time: now,
                response_wall: SystemTime::now(),
            },
        );
        Variants::new(vec![Arc::new(entry)])
    }

    /// A directory of `test`'s own.
    fn temp_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("courier-disk-{}-{test}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn temp_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, bytes).unwrap();
        path
    }

    /// `encode`, with the checksum made again over a changed payload: a file whose head checks
    /// out.
    fn resealed(mut file: Vec<u8>) -> Vec<u8> {
        let sum = checksum(&[&file[24..32], &file[HEAD..]]);
        file[16..24].copy_from_slice(&sum.to_le_bytes());
        file
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_reads_back_as_it_was_written() {
        let key = "http://h/x";
        let stored = variants(
            &[
                ("etag", "\"v\""),
                ("cache-control", "max-age=60"),
                ("content-length", "5"),
            ],
            "hello",
        );
        let written = Instant::now();
        tokio::time::advance(Duration::from_secs(3)).await;
        let file = encode(key, &stored, Instant::now(), SystemTime::now());
        let dir = temp_dir("roundtrip");
        let path = temp_file(&dir, "roundtrip.entry", &file);
        let now = Instant::now();
        let read = read_file(&path, key, now, Duration::from_secs(1))
            .unwrap()
            .unwrap();
        let (before, after) = (&stored.entries()[0], &read.entries()[0]);
        assert_eq!(after.status, before.status);
        assert_eq!(after.headers, before.headers);
        assert_eq!(after.body, before.body);
        assert_eq!(after.credentials, 7);
        assert_eq!(after.vary, before.vary);
        assert_eq!(after.lifetime, Some(Duration::from_secs(60)));
        assert_eq!(after.etag_value, before.etag_value);
        assert_eq!(after.weight, before.weight);
        assert_eq!(
            after.current_age(now),
            before.current_age(written) + Duration::from_secs(3 + 1),
            "the age at the write, and the time since"
        );
        assert!(matches!(
            read_file(&path, "http://h/other", now, Duration::ZERO),
            Ok(None)
        ));
        fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_that_fails_a_check_is_never_read() {
        let key = "http://h/x";
        let file = encode(
            key,
            &variants(&[("content-length", "5")], "hello"),
            Instant::now(),
            SystemTime::now(),
        );
        let body_at = file.len() - 1;
        let dir = temp_dir("checks");
        let check = |name: &str, bytes: &[u8], why: &str| {
            let path = temp_file(&dir, name, bytes);
            assert_eq!(
                read_file(&path, key, Instant::now(), Duration::ZERO).unwrap_err(),
                why,
                "{name}"
            );
        };
        let mut flipped = file.clone();
        flipped[body_at] ^= 1;
        check("flipped.entry", &flipped, "checksum");
        let mut late = file.clone();
        late[24] ^= 1;
        check("wall.entry", &late, "checksum");
        check("short.entry", &file[..file.len() - 1], "wrong length");
        check("head.entry", &file[..10], "wrong length");
        let mut longer = file.clone();
        longer.push(0);
        check("long.entry", &longer, "wrong length");
        check("garbage.entry", &[7; 100], "not this format");

        // Sealed again, so that only the content is wrong: a body shorter than its
        // `Content-Length`, a field name no field can have, a status out of range.
        let mut short_body = file.clone();
        short_body.truncate(body_at);
        let len_at = short_body.len() - 4 - 8;
        short_body[len_at..len_at + 8].copy_from_slice(&4_u64.to_le_bytes());
        let payload = (short_body.len() - HEAD) as u64;
        short_body[8..16].copy_from_slice(&payload.to_le_bytes());
        check("length.entry", &resealed(short_body), "garbage");
        let name_at = file
            .windows(14)
            .position(|w| w == b"content-length")
            .unwrap();
        let mut bad_name = file.clone();
        bad_name[name_at] = b' ';
        check("name.entry", &resealed(bad_name), "garbage");
        let status_at = HEAD + 4 + key.len() + 4;
        let mut bad_status = file.clone();
        bad_status[status_at..status_at + 2].copy_from_slice(&1000_u16.to_le_bytes());
        check("status.entry", &resealed(bad_status), "garbage");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn file_names_are_the_key_ids() {
        let id = file_id("http://h/x");
        assert_eq!(parse_file_name(&format!("{id:016x}.entry")), Some(id));
        assert_eq!(parse_file_name("abc.entry"), None);
        assert_eq!(parse_file_name(&format!("{id:016x}.tmp")), None);
        assert_ne!(file_id("http://h/x"), file_id("http://h/y"));
    }
}
