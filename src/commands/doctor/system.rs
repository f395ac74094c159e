//! The machine's side of a mount: the FUSE device and helper, the kernel's passthrough and NFS
//! client, the cache disk and the memory a container allows. Read-only: nothing is loaded,
//! created or mounted (a doctor that `modprobe`s changes what it diagnoses).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Access, FileType, Mode, OFlags, StatVfsMountFlags};
use rustix::io::Errno;

use super::{Check, human};

const FUSE_DEV: &str = "/dev/fuse";
/// `/dev/fuse` is the misc device 10:229 on every Linux.
const FUSE_MAJOR_MINOR: (u32, u32) = (10, 229);
/// The first kernel with FUSE passthrough (`FUSE_PASSTHROUGH` at INIT).
const PASSTHROUGH_SINCE: (u32, u32) = (6, 9);

/// `/dev/fuse` exists, is the FUSE device, and opens read-write (what every FUSE mount does
/// first; a container without `--device /dev/fuse` fails here).
pub fn fuse_device(root: bool) -> Check {
    const NAME: &str = "fuse-device";
    let in_container = "in a container, pass the device: `docker run --device /dev/fuse --cap-add SYS_ADMIN …` \
         (Kubernetes: the CSI driver, docs/KUBERNETES.md)";
    let st = match rustix::fs::stat(FUSE_DEV) {
        Ok(st) => st,
        Err(Errno::NOENT) => {
            return Check::fail(
                NAME,
                format!("{FUSE_DEV} does not exist: no FUSE mount can start"),
                format!("`sudo modprobe fuse` (or `sudo mknod -m 0666 {FUSE_DEV} c 10 229`); {in_container}"),
            );
        }
        Err(e) => {
            return Check::fail(
                NAME,
                format!("cannot stat {FUSE_DEV}: {e}"),
                format!("check {FUSE_DEV}'s parent /dev; {in_container}"),
            );
        }
    };
    let kind = FileType::from_raw_mode(st.st_mode);
    let dev = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
    if kind != FileType::CharacterDevice || dev != FUSE_MAJOR_MINOR {
        return Check::fail(
            NAME,
            format!(
                "{FUSE_DEV} is not the FUSE device (a {kind:?}, {}:{}; expected a character device 10:229)",
                dev.0, dev.1
            ),
            format!("`sudo rm {FUSE_DEV} && sudo mknod -m 0666 {FUSE_DEV} c 10 229`"),
        );
    }
    match rustix::fs::open(FUSE_DEV, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()) {
        Ok(_fd) => Check::ok(
            NAME,
            format!("{FUSE_DEV} is the character device 10:229 and opens read-write"),
        ),
        Err(e @ (Errno::ACCESS | Errno::PERM)) => {
            let fix = if root {
                format!("a security policy refuses {FUSE_DEV} even to root: {in_container}")
            } else {
                format!(
                    "run as root, or `sudo chmod 0666 {FUSE_DEV}` (most distributions' mode; it is {:04o} here)",
                    st.st_mode & 0o7777
                )
            };
            Check::fail(
                NAME,
                format!("{FUSE_DEV} exists but cannot be opened read-write: {e}"),
                fix,
            )
        }
        Err(e @ (Errno::NODEV | Errno::NXIO)) => Check::fail(
            NAME,
            format!("{FUSE_DEV} exists but the kernel has no FUSE behind it: {e}"),
            "`sudo modprobe fuse` (a kernel built without CONFIG_FUSE_FS cannot mount FUSE: use `hubfs serve-nfs`)",
        ),
        Err(e) => Check::fail(
            NAME,
            format!("{FUSE_DEV} cannot be opened read-write: {e}"),
            in_container.to_string(),
        ),
    }
}

/// The first executable `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// `fusermount3`: how a mount started by a user other than root reaches the kernel (it is setuid
/// root). Root mounts with the mount syscall and only unmounts through it as a fallback.
pub fn fusermount(root: bool) -> Check {
    const NAME: &str = "fusermount3";
    let install = "`sudo apt-get install fuse3` (Fedora: `sudo dnf install fuse3`)";
    match (on_path("fusermount3"), root) {
        (Some(p), true) => Check::ok(
            NAME,
            format!(
                "{} is present (root mounts without it; unmount falls back to it)",
                p.display()
            ),
        ),
        (None, true) => Check::ok(
            NAME,
            format!("not on PATH; not needed as root ({install} gives it, for users other than root)"),
        ),
        (None, false) => Check::fail(
            NAME,
            "not on PATH: a user other than root mounts FUSE through it",
            format!("{install}, or mount as root"),
        ),
        (Some(p), false) => match std::fs::metadata(&p) {
            Ok(m) if m.uid() == 0 && m.permissions().mode() & 0o4000 != 0 => {
                Check::ok(NAME, format!("{} is present and setuid root", p.display()))
            }
            _ => Check::fail(
                NAME,
                format!("{} is not setuid root: a mount as a user cannot use it", p.display()),
                format!(
                    "`sudo chown root {0} && sudo chmod u+s {0}` (or reinstall fuse3)",
                    p.display()
                ),
            ),
        },
    }
}

/// `user_allow_other` in /etc/fuse.conf: needed only for `--allow-other` by a user other than
/// root, so it is at most a warning.
pub fn allow_other(root: bool) -> Check {
    const NAME: &str = "allow-other";
    const CONF: &str = "/etc/fuse.conf";
    if root {
        return Check::ok(
            NAME,
            format!("running as root: --allow-other works without user_allow_other in {CONF}"),
        );
    }
    let set = std::fs::read_to_string(CONF)
        .map(|s| s.lines().any(|l| l.trim() == "user_allow_other"))
        .unwrap_or(false);
    if set {
        Check::ok(NAME, format!("user_allow_other is set in {CONF}: --allow-other works"))
    } else {
        Check::warn(
            NAME,
            format!(
                "user_allow_other is not set in {CONF}: `hubfs mount --allow-other` fails for this user \
                 (mounts without it are fine)"
            ),
            format!("only if other users must see the mount: `echo user_allow_other | sudo tee -a {CONF}`"),
        )
    }
}

/// `6.18.44-foo` → (6, 18).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// The value of `key` in the kernel's build config, from /boot/config-RELEASE or /proc/config.gz
/// (through `gzip -dc`: no decompressor is linked for one file); `None` when neither can be read,
/// `Some(None)` when the config says nothing of it (not set).
fn kernel_config(release: &str, key: &str) -> Option<(Option<String>, &'static str)> {
    let find = |text: &str| {
        let prefix = format!("{key}=");
        text.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
    };
    if let Ok(text) = std::fs::read_to_string(format!("/boot/config-{release}")) {
        return Some((find(&text), "/boot/config"));
    }
    if !Path::new("/proc/config.gz").exists() {
        return None;
    }
    let out = std::process::Command::new("gzip")
        .args(["-dc", "/proc/config.gz"])
        // Piped, not /dev/null: a container's /dev may lack it.
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some((find(&String::from_utf8_lossy(&out.stdout)), "/proc/config.gz"))
}

/// Whether read-only mounts will get FUSE passthrough (`--passthrough auto`). Only the kernel's
/// answer to a mount's INIT says for sure; without mounting, doctor reads what decides it: the
/// kernel version (6.9+), the build config's CONFIG_FUSE_PASSTHROUGH when readable, and root
/// (the backing-file ioctl needs CAP_SYS_ADMIN). A running hubfs mount's own answer, from its
/// registry record, beats all of that.
pub fn passthrough(root: bool) -> Check {
    const NAME: &str = "passthrough";
    let without = "reads of cached files go through the hubfs process instead of straight from the cache file";
    if let Some(said) = crate::process::registry::live()
        .into_iter()
        .find_map(|r| r.passthrough.map(|p| (r.mountpoint, p)))
    {
        return Check::ok(
            NAME,
            format!("the running mount at {} reports passthrough: {}", said.0, said.1),
        );
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    let Some(version) = kernel_version(release) else {
        return Check::warn(
            NAME,
            format!("cannot read the kernel version ({release:?}); {without} if it lacks passthrough"),
            "nothing to do: a mount logs whether the kernel granted passthrough, `hubfs status` shows it",
        );
    };
    if version < PASSTHROUGH_SINCE {
        return Check::warn(
            NAME,
            format!("kernel {release} predates FUSE passthrough (6.9): {without}"),
            "a Linux 6.9+ kernel with CONFIG_FUSE_PASSTHROUGH=y (or accept daemon reads)",
        );
    }
    let config = kernel_config(release, "CONFIG_FUSE_PASSTHROUGH");
    if let Some((value, from)) = &config
        && value.as_deref() != Some("y")
    {
        return Check::warn(
            NAME,
            format!("kernel {release}, but {from} has no CONFIG_FUSE_PASSTHROUGH=y: {without}"),
            "a kernel built with CONFIG_FUSE_PASSTHROUGH=y (or accept daemon reads)",
        );
    }
    if !root {
        return Check::warn(
            NAME,
            format!("kernel {release} has it, but opening backing files needs root (CAP_SYS_ADMIN): {without}"),
            "mount as root to use it (or accept daemon reads)",
        );
    }
    let how = match &config {
        Some((_, from)) => format!("CONFIG_FUSE_PASSTHROUGH=y in {from}"),
        None => "build config not readable, so CONFIG_FUSE_PASSTHROUGH is assumed".to_string(),
    };
    Check::ok(
        NAME,
        format!(
            "kernel {release} ≥ 6.9, {how}, root: read-only mounts should get it \
             (the mount learns for sure at FUSE INIT; `hubfs status` shows it)"
        ),
    )
}

/// The kernel's NFS client, for `hubfs mount --nfs` (`hubfs serve-nfs` and `--serve-only` serve
/// without one, and FUSE mounts never need it). Not loaded here: a module on disk counts.
pub fn nfs_client() -> Check {
    const NAME: &str = "nfs-client";
    let in_kernel = std::fs::read_to_string("/proc/filesystems")
        .map(|s| {
            s.lines()
                .any(|l| matches!(l.split_whitespace().last(), Some("nfs" | "nfs4")))
        })
        .unwrap_or(false);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let module = std::fs::read_dir(format!("/lib/modules/{}/kernel/fs/nfs", release.trim()))
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("nfs.ko"))
        })
        .unwrap_or(false);
    let helper = ["mount.nfs"].iter().find_map(|n| on_path(n)).or_else(|| {
        ["/sbin/mount.nfs", "/usr/sbin/mount.nfs"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    });
    let helper_note = match &helper {
        Some(p) => format!("{} present", p.display()),
        None => "no mount.nfs (nfs-common)".to_string(),
    };
    match (in_kernel, module) {
        (true, _) => Check::ok(
            NAME,
            format!(
                "the kernel has an NFS client (nfs in /proc/filesystems; {helper_note}): `hubfs mount --nfs` works"
            ),
        ),
        (false, true) => Check::ok(
            NAME,
            format!("the kernel's NFS client is a module, loaded by the first `hubfs mount --nfs` ({helper_note})"),
        ),
        (false, false) => Check::warn(
            NAME,
            format!(
                "no kernel NFS client (no nfs in /proc/filesystems, no nfs module; {helper_note}): \
                 `hubfs mount --nfs` cannot mount here; FUSE mounts (the default) do not need it"
            ),
            "use FUSE (the default), or `hubfs serve-nfs` / `mount --nfs --serve-only` for a client \
             elsewhere; for kernel NFS: a kernel with CONFIG_NFS_FS and `sudo apt-get install nfs-common`",
        ),
    }
}

/// Bytes below `dir` (blocks actually used), counting at most `limit` entries; `None` past it.
fn used_below(dir: &Path, limit: usize) -> Option<u64> {
    let mut stack = vec![dir.to_path_buf()];
    let (mut seen, mut bytes) = (0usize, 0u64);
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            seen += 1;
            if seen > limit {
                return None;
            }
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                bytes += m.blocks() * 512;
            }
        }
    }
    Some(bytes)
}

/// The cache dir the mount would use: writable, and with room for the disk tier at its size
/// (`--cache-size`, 10G by default) on top of what the cache already holds.
pub fn cache_disk(cache_dir: Option<PathBuf>, cache_size: u64, write: bool) -> Check {
    const NAME: &str = "cache-disk";
    let dir = cache_dir.unwrap_or_else(crate::vfs::default_cache_dir);
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    // The mount creates the dir: what counts is the nearest existing ancestor.
    let Some(existing) = dir.ancestors().find(|p| p.exists()) else {
        return Check::fail(
            NAME,
            format!("no part of {} exists", dir.display()),
            "pass --cache-dir DIR on a writable disk",
        );
    };
    let fs = match rustix::fs::statvfs(existing) {
        Ok(fs) => fs,
        Err(e) => {
            return Check::fail(
                NAME,
                format!("cannot statvfs {}: {e}", existing.display()),
                "pass --cache-dir DIR on a writable disk",
            );
        }
    };
    let writable = !fs.f_flag.contains(StatVfsMountFlags::RDONLY)
        && rustix::fs::access(existing, Access::WRITE_OK | Access::EXEC_OK).is_ok();
    if !writable {
        return Check::fail(
            NAME,
            format!(
                "{} cannot be written (by this user, or a read-only filesystem)",
                existing.display()
            ),
            "pass --cache-dir DIR on a disk this user can write (or --cache-size 0 to turn the disk cache off)",
        );
    }
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    let staging = if write {
        "; --write stages written files there too"
    } else {
        ""
    };
    if cache_size == 0 {
        return Check::ok(
            NAME,
            format!(
                "disk cache off (--cache-size 0); {} free at {}{staging}",
                human(free),
                dir.display()
            ),
        );
    }
    let held = if dir.exists() {
        used_below(&dir, 200_000).unwrap_or(0)
    } else {
        0
    };
    let needed = cache_size.saturating_sub(held);
    let detail = format!(
        "{}: {} free on its disk, the disk cache may grow to {} (--cache-size){}{staging}",
        dir.display(),
        human(free),
        human(cache_size),
        if held > 0 {
            format!(", {} of it already held", human(held))
        } else {
            String::new()
        },
    );
    if free >= needed {
        Check::ok(NAME, detail)
    } else {
        let fits = (free + held) / 10 * 8;
        Check::warn(
            NAME,
            format!("{detail}: the disk fills before the cache does"),
            format!(
                "mount with --cache-size {}M, or --cache-dir DIR on a disk with {} free",
                fits >> 20,
                human(needed)
            ),
        )
    }
}

/// `MemAvailable` from /proc/meminfo.
fn mem_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib << 10)
}

/// The mount's memory budget (`--memory-limit`, default half the cgroup's limit within 96M–512M)
/// against the cgroup's limit and the memory available now: a budget the container cannot hold
/// gets the mount (or the program reading through it) OOM-killed.
pub fn memory(asked: Option<u64>) -> Check {
    let (budget, source) = crate::chunk_store::budget::limit_or_default(asked, "--memory-limit");
    judge_memory(
        budget,
        &source,
        crate::chunk_store::budget::cgroup_memory_max(),
        mem_available(),
    )
}

/// [`memory`]'s verdict on a budget, the cgroup's limit (and its file) and the memory available.
fn judge_memory(budget: u64, source: &str, cgroup: Option<(u64, PathBuf)>, available: Option<u64>) -> Check {
    const NAME: &str = "memory";
    let head = format!("mount budget {} ({source})", human(budget));
    let smaller = |room: u64| {
        format!(
            "--memory-limit {}M",
            (room / 2).max(crate::chunk_store::budget::MIN_LIMIT) >> 20
        )
    };
    if let Some((max, file)) = cgroup {
        let at = format!("cgroup limit {} ({})", human(max), file.display());
        if budget >= max {
            return Check::warn(
                NAME,
                format!("{head} does not fit the {at}: the kernel OOM-kills before the budget holds reads back"),
                format!(
                    "raise the container's memory limit above {}, or mount with {}",
                    human(budget * 2),
                    smaller(max)
                ),
            );
        }
        if budget > max / 2 {
            return Check::warn(
                NAME,
                format!(
                    "{head} leaves {} of the {at} to the programs reading through the mount",
                    human(max - budget)
                ),
                format!(
                    "raise the container's memory limit to {}, or mount with {}",
                    human(budget * 2),
                    smaller(max)
                ),
            );
        }
        return Check::ok(NAME, format!("{head} fits the {at}"));
    }
    match available {
        Some(avail) if avail < budget => Check::warn(
            NAME,
            format!(
                "{head}; no cgroup memory limit, but only {} is available now",
                human(avail)
            ),
            format!("mount with {} or free memory", smaller(avail)),
        ),
        Some(avail) => Check::ok(
            NAME,
            format!("{head}; no cgroup memory limit, {} available", human(avail)),
        ),
        None => Check::ok(NAME, format!("{head}; no cgroup memory limit")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(kernel_version("6.18.44-fc-v857"), Some((6, 18)));
        assert_eq!(kernel_version("6.9.0"), Some((6, 9)));
        assert_eq!(kernel_version("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(kernel_version("6"), None);
        assert!(kernel_version("6.8.1").unwrap() < PASSTHROUGH_SINCE);
    }

    #[test]
    fn a_budget_the_cgroup_cannot_hold_warns() {
        use super::super::Status;
        const MIB: u64 = 1 << 20;
        let file = || Some(PathBuf::from("/sys/fs/cgroup/x/memory.max"));
        let cg = |max: u64| file().map(|f| (max, f));
        // The default under a 1 GiB limit: half of it, fits.
        let c = judge_memory(512 * MIB, "half", cg(1024 * MIB), None);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.detail.contains("/sys/fs/cgroup/x/memory.max"), "{c:?}");
        // 150 MiB: the budget's floor (96 MiB) leaves 54 MiB to the readers.
        let c = judge_memory(96 * MIB, "half", cg(150 * MIB), None);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("leaves 54 MiB"), "{c:?}");
        // An explicit --memory-limit over the cgroup's limit.
        let c = judge_memory(2048 * MIB, "--memory-limit", cg(1024 * MIB), None);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("does not fit") && c.fix.as_deref().unwrap().contains("--memory-limit 512M"));
        // No cgroup limit: what is available now decides.
        assert_eq!(
            judge_memory(512 * MIB, "default", None, Some(256 * MIB)).status,
            Status::Warn
        );
        assert_eq!(
            judge_memory(512 * MIB, "default", None, Some(8192 * MIB)).status,
            Status::Ok
        );
    }

    #[test]
    fn a_cache_dir_that_cannot_hold_the_cache_warns() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache_disk(Some(dir.path().join("cache")), u64::MAX / 2, false);
        assert_eq!(c.status, super::super::Status::Warn, "{c:?}");
        assert!(c.fix.as_deref().unwrap().contains("--cache-size"), "{c:?}");
        let c = cache_disk(Some(dir.path().join("cache")), 1 << 20, true);
        assert_eq!(c.status, super::super::Status::Ok, "{c:?}");
    }
}
