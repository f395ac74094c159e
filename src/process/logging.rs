//! Logging setup: `tracing` filtered by RUST_LOG (default `info` for hubfs, `warn` for dependencies),
//! written to stderr, or for a `--daemon` mount to a size-capped log file that rotates once
//! (`NAME.log` → `NAME.log.1`). Token values are never passed to a log macro anywhere in hubfs.
//!
//! A daemon's stderr is the log file too (see [`LogFile::redirect_stderr`]), so a panic message or a
//! stray `eprintln!` after detaching lands in the log instead of a pipe nobody reads.

use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use parking_lot::Mutex;
use tracing_subscriber::EnvFilter;

/// Default cap of one log file; the rotated `.1` file holds at most as much again.
pub const DEFAULT_LOG_MAX: u64 = 10 << 20;

/// The daemon's log file: appended to, rotated once when it passes `max` bytes.
pub struct LogFile {
    path: PathBuf,
    max: u64,
    inner: Mutex<LogInner>,
}

struct LogInner {
    file: File,
    len: u64,
    /// Whether fd 2 follows the file (set once the daemon has detached).
    owns_stderr: bool,
}

impl LogFile {
    /// Opens (creating the directory) `path` for appending.
    pub fn open(path: &Path, max: u64) -> std::io::Result<LogFile> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(path)?;
        let len = file.metadata()?.len();
        Ok(LogFile {
            path: path.to_path_buf(),
            max: max.max(4096),
            inner: Mutex::new(LogInner {
                file,
                len,
                owns_stderr: false,
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Points fd 2 at the log file, now and after every rotation.
    pub fn redirect_stderr(&self) -> std::io::Result<()> {
        let mut g = self.inner.lock();
        rustix::stdio::dup2_stderr(&g.file)?;
        g.owns_stderr = true;
        Ok(())
    }

    fn write_line(&self, buf: &[u8]) -> std::io::Result<()> {
        let mut g = self.inner.lock();
        if g.len + buf.len() as u64 > self.max && g.len > 0 {
            // Rotation failing (disk full, directory gone) must not stop the mount: keep appending.
            if let Err(e) = self.rotate(&mut g) {
                let _ = writeln!(g.file, "hubfs: log rotation failed: {e}");
            }
        }
        g.file.write_all(buf)?;
        g.len += buf.len() as u64;
        Ok(())
    }

    /// Moves the log to `NAME.log.1` and starts an empty `NAME.log`. The empty file is made
    /// beside it and swapped in atomically (`renameat2(RENAME_EXCHANGE)`), so `NAME.log` never
    /// goes missing for a reader (`tail -F`, a test) in between; where the filesystem cannot
    /// swap, rename then create as before.
    fn rotate(&self, g: &mut LogInner) -> std::io::Result<()> {
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        let mut fresh = self.path.clone().into_os_string();
        fresh.push(".new");
        // A leftover of a crash in the middle of a rotation would start the new log with old lines.
        let _ = std::fs::remove_file(&fresh);
        let new_file = open_append(Path::new(&fresh))?;
        if exchange(Path::new(&fresh), &self.path).is_ok() {
            // `fresh` now names the full log.
            std::fs::rename(&fresh, &old)?;
            g.file = new_file;
        } else {
            drop(new_file);
            let _ = std::fs::remove_file(&fresh);
            std::fs::rename(&self.path, &old)?;
            g.file = open_append(&self.path)?;
        }
        g.len = 0;
        if g.owns_stderr {
            rustix::stdio::dup2_stderr(&g.file)?;
        }
        Ok(())
    }
}

/// Swaps the names `a` and `b` in one step (`renameat2(RENAME_EXCHANGE)`, Linux 3.15+).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    Ok(renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE)?)
}

fn open_append(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // 0600: a log may name private repos and paths.
    OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}

/// Where log lines go: stderr until [`init_file`] installs a file.
static SINK: OnceLock<LogFile> = OnceLock::new();

struct SinkWriter;

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match SINK.get() {
            Some(f) => f.write_line(buf).map(|()| buf.len()),
            None => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `fuser::mnt` warns "Unmount failed" at every external unmount (the kernel already detached the
/// mount); hubfs reports its own unmount failures.
fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,hubfs=info,xet_client=error,xet_data=error,fuser::mnt=error"))
}

/// How log lines look (`--log-format`, `HUBFS_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields), for log collectors.
    Json,
}

type FilterHandle = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// The live filter, so that SIGUSR1/SIGUSR2 can change it in a running process.
static FILTER: OnceLock<FilterHandle> = OnceLock::new();

/// What SIGUSR1 raises the log level to.
const VERBOSE: &str = "warn,hubfs=debug,xet_client=error,xet_data=error,fuser::mnt=error";

/// Logs to stderr (colours only on a terminal), as text.
pub fn init() {
    init_with(LogFormat::Text);
}

/// Logs to stderr in `format`; the filter comes from `RUST_LOG` (default: hubfs at info).
pub fn init_with(format: LogFormat) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // The log's filter is the log layer's own, so the metrics layer (Xet upload requests) sees
    // its events whatever RUST_LOG says.
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter());
    let fmt = tracing_subscriber::fmt::layer().with_writer(|| SinkWriter);
    let registry = tracing_subscriber::registry();
    let ok = match format {
        LogFormat::Text => registry
            .with(fmt.with_ansi(std::io::stderr().is_terminal()).with_filter(filter))
            .with(crate::metrics::xet_upload::layer())
            .try_init()
            .is_ok(),
        LogFormat::Json => registry
            .with(fmt.json().with_ansi(false).with_filter(filter))
            .with(crate::metrics::xet_upload::layer())
            .try_init()
            .is_ok(),
    };
    if ok {
        let _ = FILTER.set(handle);
    }
}

/// Replaces the log filter of this process (`RUST_LOG` syntax).
pub fn set_filter(directives: &str) -> Result<(), String> {
    let f = EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
    FILTER
        .get()
        .ok_or("logging is not initialised")?
        .reload(f)
        .map_err(|e| e.to_string())
}

/// Until the runtime stops: SIGUSR1 raises the log level to debug for hubfs, SIGUSR2 brings back
/// the level the process started with (`RUST_LOG` or the default). A running mount's log gets
/// more detail without a restart: `kill -USR1 PID`.
pub async fn level_signals() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut up), Ok(mut back)) = (signal(SignalKind::user_defined1()), signal(SignalKind::user_defined2())) else {
        tracing::warn!("SIGUSR1/SIGUSR2 cannot change the log level of this process");
        return;
    };
    loop {
        let (directives, what) = tokio::select! {
            _ = up.recv() => (VERBOSE.to_string(), "SIGUSR1: logging at debug"),
            _ = back.recv() => (filter().to_string(), "SIGUSR2: logging at the starting level"),
        };
        match set_filter(&directives) {
            Ok(()) => tracing::warn!("{what}"),
            Err(e) => tracing::warn!(error = %e, "changing the log level"),
        }
    }
}

/// Logs to `path` (capped at `max` bytes, rotated once) instead of stderr, from now on. [`init`]
/// must have run (the subscriber is global and set once; only its destination changes here).
pub fn to_file(path: &Path, max: u64) -> std::io::Result<&'static LogFile> {
    let file = LogFile::open(path, max)?;
    if SINK.set(file).is_err() {
        return Err(std::io::Error::other("this process already logs to a file"));
    }
    SINK.get()
        .ok_or_else(|| std::io::Error::other("the log file was not installed"))
}

/// The log file of this process, if it logs to one.
pub fn log_file() -> Option<&'static LogFile> {
    SINK.get()
}

/// `<cache>/logs/<mountpoint as a file name>.log`: one log per mountpoint, so a remount at the same
/// place continues the same file and a user finds it by where they mounted.
pub fn default_log_path(cache_dir: &Path, mountpoint: &Path) -> PathBuf {
    let abs = std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let mut name: String = abs
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        name.push_str("root");
    }
    // Keep the name under NAME_MAX with room for ".log.1"; the tail is the distinctive part.
    if name.len() > 200 {
        name = name[name.len() - 200..].to_string();
    }
    cache_dir.join("logs").join(format!("{name}.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_once_and_stays_under_twice_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/m.log");
        let log = LogFile::open(&path, 4096).unwrap();
        let line = [b'x'; 100];
        for _ in 0..1000 {
            log.write_line(&line).unwrap();
        }
        let cur = std::fs::metadata(&path).unwrap().len();
        let old = std::fs::metadata(dir.path().join("logs/m.log.1")).unwrap().len();
        assert!(cur <= 4096, "current file {cur} bytes");
        assert!(old <= 4096 && old > 3000, "rotated file {old} bytes");
        // Lines are never split across the two files.
        assert_eq!(cur % 100, 0);
        assert_eq!(old % 100, 0);
    }

    #[test]
    fn the_log_never_goes_missing_while_it_rotates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.log");
        let log = std::sync::Arc::new(LogFile::open(&path, 2048).unwrap());
        let writer = {
            let log = log.clone();
            std::thread::spawn(move || {
                for _ in 0..5000 {
                    log.write_line(&[b'y'; 64]).unwrap();
                }
            })
        };
        while !writer.is_finished() {
            assert!(path.exists(), "the log was missing during a rotation");
        }
        writer.join().unwrap();
        assert!(dir.path().join("m.log.1").exists());
        assert!(!dir.path().join("m.log.new").exists(), "no swap file is left");
    }

    #[test]
    fn reopening_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        LogFile::open(&path, 1 << 20).unwrap().write_line(b"one\n").unwrap();
        LogFile::open(&path, 1 << 20).unwrap().write_line(b"two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");
    }

    #[test]
    fn log_names_follow_the_mountpoint() {
        let p = default_log_path(Path::new("/c"), Path::new("/work/x y/gpt2"));
        assert_eq!(p, Path::new("/c/logs/work_x_y_gpt2.log"));
        assert_eq!(
            default_log_path(Path::new("/c"), Path::new("/")),
            Path::new("/c/logs/root.log")
        );
    }
}
