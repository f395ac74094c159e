//! Command-line interface. Each subcommand parses its options, then calls into the library.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::local_hub::{FaultSettings, LocalHub, LocalHubConfig, RouteClass, TokenSpec};

#[derive(Parser, Debug)]
#[command(
    name = "hubfs",
    version,
    about = "Mount Hugging Face Hub repositories as local directories"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run an offline Hub (HTTP API, LFS and Xet) that stock clients and hubfs can use.
    LocalHub(LocalHubArgs),
}

#[derive(Args, Debug)]
pub struct LocalHubArgs {
    /// Directory holding every repo, commit and blob; a restart with the same dir serves the same data.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Address of the API origin (the blob and CAS origins take free ports on the same IP).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// A token as NAME:TOKEN:read|write (repeatable). Without any, hf_local_write and hf_local_read exist.
    #[arg(long = "token", value_name = "NAME:TOKEN:ROLE")]
    pub tokens: Vec<TokenSpec>,
    /// Create the demo repos demo/tiny-model and datasets/demo/tiny-dataset if missing.
    #[arg(long)]
    pub seed_demo: bool,
    #[command(flatten)]
    pub faults: FaultArgs,
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
}

impl FaultArgs {
    /// Folds the flags into settings per class.
    pub fn to_settings(&self) -> anyhow::Result<Vec<(RouteClass, FaultSettings)>> {
        let mut per = [
            FaultSettings::default(),
            FaultSettings::default(),
            FaultSettings::default(),
        ];
        let knobs: [(&str, &Vec<String>, Apply); 6] = [
            ("--latency-ms", &self.latency_ms, |s, v| s.latency_ms = v as u64),
            ("--bandwidth-mbps", &self.bandwidth_mbps, |s, v| s.bandwidth_mbps = v),
            ("--error-rate", &self.error_rate, |s, v| s.error_rate = v),
            ("--stall-rate", &self.stall_rate, |s, v| s.stall_rate = v),
            ("--reset-rate", &self.reset_rate, |s, v| s.reset_rate = v),
            ("--rate-limit", &self.rate_limit, |s, v| s.rate_limit = v),
        ];
        for (flag, values, apply) in knobs {
            for raw in values {
                let (classes, v) = match raw.split_once('=') {
                    Some((c, v)) => {
                        let class = RouteClass::parse(c).ok_or_else(|| {
                            anyhow::anyhow!("{flag} {raw}: unknown class {c:?}; use api, resolve or cas")
                        })?;
                        (vec![class], v)
                    }
                    None => (RouteClass::ALL.to_vec(), raw.as_str()),
                };
                let v: f64 = v
                    .parse()
                    .map_err(|_| anyhow::anyhow!("{flag} {raw}: {v:?} is not a number"))?;
                for c in classes {
                    apply(&mut per[c as usize], v);
                }
            }
        }
        let out: Vec<_> = RouteClass::ALL.iter().map(|c| (*c, per[*c as usize].clone())).collect();
        for (c, s) in &out {
            s.validate()
                .map_err(|e| anyhow::anyhow!("fault settings for {c:?}: {e}"))?;
        }
        Ok(out)
    }
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::LocalHub(args) => run_local_hub(args),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

fn run_local_hub(args: LocalHubArgs) -> anyhow::Result<()> {
    let faults = args.faults.to_settings()?;
    let default_tokens = args.tokens.is_empty();
    let cfg = LocalHubConfig {
        data_dir: args.data_dir,
        addr: args.addr,
        tokens: args.tokens,
        seed_demo: args.seed_demo,
        faults,
    };
    let rt = runtime()?;
    rt.block_on(async move {
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
        wait_for_signal().await?;
        tracing::info!("shutting down");
        hub.stop().await;
        Ok(())
    })
}

/// Resolves on SIGINT or SIGTERM.
pub async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
