//! Running the `courier` binary from a test, every wait bounded.

#![allow(dead_code, unreachable_pub)]

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

/// The longest a run may take before the test fails; runs take well under a few seconds.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// What one run of the binary left behind.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The per-attempt JSON lines on stderr, each checked to be a `courier::retry` event.
    pub fn attempt_lines(&self) -> Vec<Value> {
        json_lines(&self.stderr)
    }

    /// The stderr lines that are not JSON.
    pub fn messages(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| !l.starts_with('{'))
            .collect()
    }
}

/// Parses every line of `text` that starts with `{` as one attempt event.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert_eq!(v["target"], "courier::retry", "{l}");
            assert_eq!(v["message"], "attempt", "{l}");
            v
        })
        .collect()
}

/// Runs `courier ARGS...` to the end (stdin closed) and collects its output.
pub async fn courier(args: &[&str]) -> Run {
    run_with(args, None).await
}

/// Runs `courier ARGS...` with `input` on its stdin, to the end.
pub async fn courier_with_input(args: &[&str], input: &[u8]) -> Run {
    run_with(args, Some(input)).await
}

async fn run_with(args: &[&str], input: Option<&[u8]>) -> Run {
    use tokio::io::AsyncWriteExt;
    let mut child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    if let Some(input) = input {
        let mut stdin = child.stdin.take().expect("stdin is piped");
        // A run that ends before reading (a usage error) closes its stdin: not a failure here.
        // Dropping stdin closes it: the input ends.
        let _ = tokio::time::timeout(PATIENCE, stdin.write_all(input))
            .await
            .expect("the binary reads its input or exits");
    }
    let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("courier {args:?} did not finish in {PATIENCE:?}"))
        .expect("the binary runs");
    Run {
        code: out.status.code().expect("exited, not killed by a signal"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

/// A file under the system's temp directory, removed when dropped.
#[derive(Debug)]
pub struct TempFile(pub std::path::PathBuf);

impl TempFile {
    /// A path unique to this process and `tag`, with nothing at it yet.
    pub fn path(tag: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("courier-cli-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Self(path)
    }

    /// A file holding `contents`.
    pub fn with(tag: &str, contents: impl AsRef<[u8]>) -> Self {
        let file = Self::path(tag);
        std::fs::write(&file.0, contents).expect("the temp directory is writable");
        file
    }

    /// The path as a string, for an argument.
    pub fn arg(&self) -> &str {
        self.0
            .to_str()
            .expect("the temp directory has a UTF-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Starts `courier ARGS...` with `stdin`, stdout and stderr piped, killed when dropped.
pub fn spawn(args: &[&str], stdin: Stdio) -> tokio::process::Child {
    Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts")
}

/// Sends `signal` (`INT`, `TERM`) to the process `pid` with kill(1).
pub fn signal(signal: &str, pid: u32) {
    let kill = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success(), "kill -{signal} {pid}");
}
