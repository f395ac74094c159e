//! `hubfs local-hub`: the offline Hub as a process of its own, for any Hub client.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::local_hub::{FaultSettings, LocalHub, LocalHubConfig, RequestWindows, RouteClass, Tier, TokenSpec};
use crate::process::signals::{StopSignals, runtime};

#[derive(Args, Debug)]
pub struct LocalHubArgs {
    /// Directory holding every repo, commit and blob; a restart with the same dir serves the same data.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Address of the API origin (the blob and CAS origins take free ports on the same IP).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// A token as NAME:TOKEN:read|write, or NAME:TOKEN:fineGrained:SCOPES with SCOPES such as
    /// dataset/NAME/DS=repo.content.read+repo.write,user/NAME=repo.content.read (repeatable; see
    /// docs/LOCAL_HUB.md). Without any, hf_local_write and hf_local_read exist.
    #[arg(long = "token", value_name = "NAME:TOKEN:ROLE")]
    pub tokens: Vec<TokenSpec>,
    /// Create the demo repos demo/tiny-model and datasets/demo/tiny-dataset if missing.
    #[arg(long)]
    pub seed_demo: bool,
    /// Commits accepted per repository (all clients together) in any sliding window of SECONDS,
    /// like the Hub's "128 per hour"; past it commits get the Hub's 429. 0 for no limit.
    #[arg(
        long,
        value_name = "N/SECONDS",
        default_value = "128/3600",
        allow_hyphen_values = true
    )]
    pub commit_limit: crate::local_hub::CommitLimit,
    /// Most entries (files and folders) a commit may leave in one folder, like the Hub's 10,000;
    /// more is refused with the Hub's 400. 0 for no limit.
    #[arg(long, value_name = "N", default_value_t = crate::local_hub::limits::MAX_DIR_ENTRIES)]
    pub dir_entry_limit: usize,
    /// Most operations one bucket batch (and paths one bucket paths-info request) may carry, where
    /// the Hub's clients split their requests; more is refused with a 400. 0 for no limit.
    #[arg(long, value_name = "N", default_value_t = crate::local_hub::limits::MAX_BUCKET_BATCH_OPS)]
    pub bucket_batch_limit: usize,
    /// The Hub's request windows: `on` counts requests per user (per IP without a token) in fixed
    /// windows and answers the Hub's 429 past each bucket's quota (api, resolvers, pages); `off`
    /// counts nothing (for benchmarks that make more requests than the Hub allows).
    #[arg(long, value_name = "on|off", default_value = "on")]
    pub request_windows: OnOff,
    /// Length of the fixed request window in seconds (the Hub: 300).
    #[arg(long, value_name = "N", default_value_t = crate::local_hub::windows::HUB_WINDOW_SECS,
          value_parser = parse_window_secs)]
    pub request_window_secs: u64,
    /// Multiplies every documented quota (rounded up, at least 1): e.g. 0.1 with
    /// --request-window-secs 30 is the Hub's strictness in a tenth of the time.
    #[arg(long, value_name = "F", default_value_t = 1.0, value_parser = parse_quota_scale, allow_hyphen_values = true)]
    pub request_quota_scale: f64,
    /// A user's plan for the request quotas (repeatable): free (the default), pro, team,
    /// enterprise or enterprise-plus.
    #[arg(long = "rate-tier", value_name = "USER=TIER", value_parser = parse_rate_tier)]
    pub rate_tiers: Vec<(String, Tier)>,
    /// Requests per window to the Xet CAS API, per user or IP (not scaled). 0 for no limit: the
    /// Hub does not document the CAS's.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = parse_cas_quota, allow_hyphen_values = true)]
    pub cas_request_quota: u64,
    #[command(flatten)]
    pub faults: FaultArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

fn parse_window_secs(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?} is not a whole number of seconds ≥ 1")),
    }
}

fn parse_cas_quota(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .map_err(|_| format!("{s:?} is not a whole number ≥ 0 (requests per window; 0 for no limit)"))
}

fn parse_quota_scale(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number (e.g. 1, 0.1, 2.5)"))?;
    let w = RequestWindows {
        quota_scale: v,
        ..RequestWindows::default()
    };
    w.validate().map(|_| v)
}

fn parse_rate_tier(s: &str) -> Result<(String, Tier), String> {
    let (user, tier) = s.split_once('=').ok_or_else(|| {
        format!("{s:?}: expected USER=TIER, TIER one of free, pro, team, enterprise, enterprise-plus")
    })?;
    crate::local_hub::names::validate_name_part(user)
        .map_err(|_| format!("invalid user name {user:?} (letters, digits, '-', '_', '.')"))?;
    Ok((user.to_string(), tier.parse()?))
}

impl LocalHubArgs {
    fn request_windows(&self) -> RequestWindows {
        RequestWindows {
            enabled: self.request_windows == OnOff::On,
            window_secs: self.request_window_secs,
            quota_scale: self.request_quota_scale,
            tiers: self.rate_tiers.iter().cloned().collect(),
            cas_quota: self.cas_request_quota,
        }
    }
}

/// Sets one knob of a class's fault settings.
type Apply = fn(&mut FaultSettings, f64);

/// Fault knobs applied at start; each takes an optional class prefix, e.g. `cas=0.5` (default: all).
#[derive(Args, Debug, Default)]
pub struct FaultArgs {
    /// Added latency per request in ms: `30` or `resolve=30` (repeatable).
    #[arg(long = "latency-ms", value_name = "[CLASS=]MS")]
    pub latency_ms: Vec<String>,
    /// Per-connection bandwidth cap in Mbit/s.
    #[arg(long = "bandwidth-mbps", value_name = "[CLASS=]MBPS")]
    pub bandwidth_mbps: Vec<String>,
    /// Probability of answering 500.
    #[arg(long = "error-rate", value_name = "[CLASS=]P")]
    pub error_rate: Vec<String>,
    /// Probability of accepting a request and never answering.
    #[arg(long = "stall-rate", value_name = "[CLASS=]P")]
    pub stall_rate: Vec<String>,
    /// Probability of dropping the connection half-way through the body.
    #[arg(long = "reset-rate", value_name = "[CLASS=]P")]
    pub reset_rate: Vec<String>,
    /// Requests per second allowed before answering 429 with a RateLimit header.
    #[arg(long = "rate-limit", value_name = "[CLASS=]RPS")]
    pub rate_limit: Vec<String>,
    /// Probability of answering 429 with a RateLimit header (wait 1 s).
    #[arg(long = "throttle-rate", value_name = "[CLASS=]P")]
    pub throttle_rate: Vec<String>,
}

impl FaultArgs {
    /// Folds the flags into settings per class.
    pub fn to_settings(&self) -> anyhow::Result<Vec<(RouteClass, FaultSettings)>> {
        let mut per: [FaultSettings; RouteClass::EVERY.len()] = Default::default();
        let knobs: [(&str, &Vec<String>, Apply); 7] = [
            ("--latency-ms", &self.latency_ms, |s, v| s.latency_ms = v as u64),
            ("--bandwidth-mbps", &self.bandwidth_mbps, |s, v| s.bandwidth_mbps = v),
            ("--error-rate", &self.error_rate, |s, v| s.error_rate = v),
            ("--stall-rate", &self.stall_rate, |s, v| s.stall_rate = v),
            ("--reset-rate", &self.reset_rate, |s, v| s.reset_rate = v),
            ("--rate-limit", &self.rate_limit, |s, v| s.rate_limit = v),
            ("--throttle-rate", &self.throttle_rate, |s, v| s.throttle_rate = v),
        ];
        for (flag, values, apply) in knobs {
            for raw in values {
                let (classes, v) = match raw.split_once('=') {
                    Some((c, v)) => {
                        let class = RouteClass::parse(c).ok_or_else(|| {
                            anyhow::anyhow!(
                                "{flag} {raw}: unknown class {c:?}; use api, resolve, cas, commit, reconstruction, \
                                 xorb-fetch, xorb-upload or shard-upload"
                            )
                        })?;
                        (vec![class], v)
                    }
                    None => (RouteClass::ALL.to_vec(), raw.as_str()),
                };
                let v: f64 = v
                    .parse()
                    .map_err(|_| anyhow::anyhow!("{flag} {raw}: {v:?} is not a number"))?;
                if !v.is_finite() || v < 0.0 {
                    anyhow::bail!("{flag} {raw}: the value must be a non-negative number");
                }
                for c in classes {
                    apply(&mut per[c as usize], v);
                    // Check each flag on its own so the message names the flag that is wrong.
                    per[c as usize]
                        .validate()
                        .map_err(|e| anyhow::anyhow!("{flag} {raw}: {e}"))?;
                }
            }
        }
        let out: Vec<_> = RouteClass::EVERY
            .iter()
            .map(|c| (*c, per[*c as usize].clone()))
            .collect();
        for (c, s) in &out {
            s.validate()
                .map_err(|e| anyhow::anyhow!("fault settings for {c:?}: {e}"))?;
        }
        Ok(out)
    }
}

/// `hubfs local-hub`.
pub fn run(args: LocalHubArgs) -> anyhow::Result<()> {
    let faults = args.faults.to_settings()?;
    let default_tokens = args.tokens.is_empty();
    let request_windows = args.request_windows();
    let cfg = LocalHubConfig {
        data_dir: args.data_dir,
        addr: args.addr,
        tokens: args.tokens,
        seed_demo: args.seed_demo,
        faults,
        commit_limit: args.commit_limit,
        dir_entry_limit: args.dir_entry_limit,
        bucket_batch_limit: args.bucket_batch_limit,
        request_windows,
    };
    let rt = runtime()?;
    rt.block_on(async move {
        // Caught before the endpoint is printed: a stop sent right after it shuts down cleanly.
        let mut signals = StopSignals::new()?;
        let hub = LocalHub::start(cfg).await?;
        if default_tokens {
            eprintln!(
                "tokens: write {} , read {} (user local)",
                crate::local_hub::DEFAULT_WRITE_TOKEN,
                crate::local_hub::DEFAULT_READ_TOKEN
            );
        }
        println!("endpoint: {}", hub.endpoint());
        use std::io::Write;
        std::io::stdout().flush()?;
        signals.recv().await;
        tracing::info!("shutting down");
        hub.stop().await;
        Ok(())
    })
}
