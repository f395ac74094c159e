//! `hubfs mount --daemon`: runs the same command again without `--daemon` as a detached child and
//! returns once the child reports the mount usable (exit 0) or fails (its error, non-zero).

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

pub fn run_detached() -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the hubfs binary")?;
    let args: Vec<_> = std::env::args_os().skip(1).filter(|a| a != "--daemon").collect();
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: Ctrl-C in this terminal must not reach the mount.
        .process_group(0)
        .spawn()
        .context("starting the mount process")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut stderr = child.stderr.take().context("child stderr")?;
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_default();
        if line.starts_with("mounted ") {
            println!("{line} (pid {})", child.id());
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
    bail!("mount failed ({status}): {}", msg.trim_start_matches("hubfs: "))
}
