//! `hubfs commit DIR` and `hubfs sync DIR`: ask a writable mount, over its control socket, to
//! commit now or to say when everything is committed.

use std::path::Path;

use anyhow::bail;

use crate::process::control::{Request, request};

/// `hubfs commit DIR [-m MESSAGE]`.
pub fn run_commit(dir: &Path, message: Option<String>) -> anyhow::Result<()> {
    let a = request(dir, &Request::Commit { message })?;
    match (a.ok, a.nothing_pending, a.commit, a.error) {
        (Some(true), true, c, _) => {
            println!(
                "nothing to commit{}",
                c.map(|c| format!(" (last commit {c})")).unwrap_or_default()
            )
        }
        (Some(true), false, Some(c), _) => println!("{c}"),
        (Some(true), false, None, _) => println!("committed"),
        (_, _, _, e) => bail!("commit failed: {}", e.unwrap_or_else(|| "no reason given".into())),
    }
    Ok(())
}

/// `hubfs sync DIR`.
pub fn run_sync(dir: &Path) -> anyhow::Result<()> {
    let a = request(dir, &Request::Sync)?;
    match (a.ok, a.commit, a.error) {
        (Some(true), Some(c), _) => println!("everything is committed (commit {c})"),
        (Some(true), None, _) => println!("everything is committed"),
        (_, _, e) => bail!(
            "not everything could be committed: {} (the files stay staged; `hubfs status` lists them)",
            e.unwrap_or_else(|| "no reason given".into())
        ),
    }
    Ok(())
}
