//! `hubfs mount --daemon`: runs the same command again without `--daemon` as a detached child and
//! returns once the child reports the mount usable (exit 0) or fails (its error, and its exit status).
//!
//! The child must outlive the shell that started it and hold nothing of it:
//! - it starts in a session of its own (`setsid`): no controlling terminal, no SIGHUP when the
//!   terminal closes, and Ctrl-C in that terminal does not reach it;
//! - its stdin/stdout/stderr are pipes to this process only until it is ready; then it points stdin
//!   and stdout at /dev/null and stderr at its log file ([`detach`]), so nothing it writes later can
//!   meet a closed pipe (a mount that logged into its dead parent's pipe died at Python's first
//!   `open()`, whose TCGETS ioctl fuser used to warn about);
//! - the token never appears in its argv (`ps`, `/proc/PID/cmdline`) nor in its environment: it is
//!   handed over on the child's stdin, one line, before anything else.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use anyhow::Context;

use super::exit::Failure;

/// Set in the child's environment: "you are the detached mount; read the handover on stdin".
const CHILD_ENV: &str = "HUBFS_DAEMON_CHILD";

/// `args` without `--daemon` and without `--token VALUE` / `--token=VALUE`; the token, if given.
fn split_args(args: impl Iterator<Item = std::ffi::OsString>) -> (Vec<std::ffi::OsString>, Option<String>) {
    let mut out = Vec::new();
    let mut token = None;
    let mut args = args.peekable();
    let mut positional_only = false;
    while let Some(a) = args.next() {
        if positional_only {
            out.push(a);
            continue;
        }
        match a.to_str() {
            Some("--") => {
                positional_only = true;
                out.push(a);
            }
            Some("--daemon") => {}
            Some("--token") => token = args.next().map(|v| v.to_string_lossy().into_owned()),
            Some(s) if s.starts_with("--token=") => token = Some(s["--token=".len()..].to_string()),
            _ => out.push(a),
        }
    }
    (out, token)
}

/// Parent side: start the child, hand it the token, relay its readiness line and log path.
pub fn run_detached() -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the hubfs binary")?;
    let (args, arg_token) = split_args(std::env::args_os().skip(1));
    let token = arg_token.or_else(|| std::env::var("HF_TOKEN").ok().filter(|t| !t.trim().is_empty()));
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env_remove("HF_TOKEN")
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    super::child::new_session(&mut cmd);
    let mut child = cmd.spawn().context("starting the mount process")?;
    {
        let mut stdin = child.stdin.take().context("child stdin")?;
        let line = token.unwrap_or_default();
        // A failed handover shows up as the child's own error (no token, or it exited).
        let _ = stdin.write_all(line.trim().as_bytes());
        let _ = stdin.write_all(b"\n");
    }
    let stdout = child.stdout.take().context("child stdout")?;
    let mut stderr = child.stderr.take().context("child stderr")?;
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    // Lines arrive on a channel so that waiting for the pipe's end can be bounded.
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                return;
            }
        }
    });
    let mut log = None;
    // A mount that waits (for the Hub's request window, or through an outage: `--max-hub-wait`)
    // says so once, so the caller knows why nothing happens and where to look.
    let started = std::time::Instant::now();
    let mut told = false;
    loop {
        let line = match lines.recv_timeout(std::time::Duration::from_millis(500)) {
            Ok(l) => l,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if !told && started.elapsed() >= SLOW_MOUNT {
                    told = true;
                    let hint = log.as_deref().map(|p| format!("; its log: {p}")).unwrap_or_default();
                    eprintln!(
                        "hubfs: still mounting after {}s: the Hub is slow to answer, or a spent request window \
                         or an outage is waited out (up to --max-hub-wait){hint}",
                        SLOW_MOUNT.as_secs()
                    );
                }
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if let Some(p) = line.strip_prefix("log: ") {
            log = Some(p.to_string());
        } else if line.starts_with("mounted ") {
            // The child lets go of this pipe right after this line (`detach`): wait for that, so
            // that when we return it holds nothing of ours. Bounded: the mount is up either way.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while let Ok(_extra) = lines.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {}
            println!("{line} (pid {})", child.id());
            if let Some(p) = log {
                println!("log: {p}");
            }
            return Ok(());
        }
    }
    let status = child.wait().context("waiting for the mount process")?;
    let err = err_reader.join().unwrap_or_default();
    let msg = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no error output")
        .to_string();
    let hint = log.map(|p| format!(" (log: {p})")).unwrap_or_default();
    // The child's exit status names the kind of failure: this process exits with the same.
    let failure = status.code().and_then(Failure::from_code).unwrap_or(Failure::Other);
    Err(super::exit::error(
        failure,
        format!("mount failed ({status}): {}{hint}", msg.trim_start_matches("hubfs: ")),
    ))
}

/// How long `mount --daemon` waits quietly for the mount before saying why it takes long.
const SLOW_MOUNT: std::time::Duration = std::time::Duration::from_secs(10);

/// Child side: whether this process is a detached mount. If so, reads the token handed over on
/// stdin and points stdin at /dev/null. Returns `Some(token or None)` in a child, `None` otherwise.
pub fn take_handover() -> Option<Option<String>> {
    std::env::var_os(CHILD_ENV)?;
    let mut line = String::new();
    // One line, bounded: a token is short.
    let _ = BufReader::new(std::io::stdin().lock().take(64 << 10)).read_line(&mut line);
    if let Err(e) = redirect(Std::In) {
        tracing::warn!(error = %e, "could not detach stdin");
    }
    let t = line.trim().to_string();
    Some((!t.is_empty()).then_some(t))
}

/// One of the three standard descriptors.
enum Std {
    In,
    Out,
    Err,
}

/// Points `fd` at /dev/null (dup2 replaces it atomically).
fn redirect(fd: Std) -> std::io::Result<()> {
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    match fd {
        Std::In => rustix::stdio::dup2_stdin(&null)?,
        Std::Out => rustix::stdio::dup2_stdout(&null)?,
        Std::Err => rustix::stdio::dup2_stderr(&null)?,
    }
    Ok(())
}

/// Child side, once the mount is usable and the readiness line is flushed: let go of the
/// parent's pipes (stderr to the log file, then stdout to /dev/null) and ignore SIGHUP.
pub fn detach() {
    if let Err(e) = std::io::stdout().flush() {
        tracing::debug!(error = %e, "flushing stdout before detaching");
    }
    super::signals::ignore_hangup();
    let stderr = match crate::process::logging::log_file() {
        Some(f) => f.redirect_stderr(),
        None => redirect(Std::Err),
    };
    if let Err(e) = stderr {
        tracing::warn!(error = %e, "could not detach stderr");
    }
    // Last: the parent waits for the end of this pipe, and takes it to mean "detached".
    if let Err(e) = redirect(Std::Out) {
        tracing::warn!(error = %e, "could not detach stdout");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn split(v: &[&str]) -> (Vec<String>, Option<String>) {
        let (a, t) = split_args(v.iter().map(OsString::from));
        (a.into_iter().map(|s| s.into_string().unwrap()).collect(), t)
    }

    #[test]
    fn token_and_daemon_are_taken_out_of_the_argv() {
        let (a, t) = split(&["mount", "--token", "hf_x", "a/b", "--daemon", "/m"]);
        assert_eq!(a, ["mount", "a/b", "/m"]);
        assert_eq!(t.as_deref(), Some("hf_x"));
        let (a, t) = split(&["mount", "--token=hf_y", "a/b", "/m", "--daemon"]);
        assert_eq!(a, ["mount", "a/b", "/m"]);
        assert_eq!(t.as_deref(), Some("hf_y"));
        let (a, t) = split(&["mount", "a/b", "/m"]);
        assert_eq!(a, ["mount", "a/b", "/m"]);
        assert_eq!(t, None);
        // After `--` everything is positional (a mountpoint may be called --token).
        let (a, t) = split(&["mount", "a/b", "--", "--token"]);
        assert_eq!(a, ["mount", "a/b", "--", "--token"]);
        assert_eq!(t, None);
    }
}
