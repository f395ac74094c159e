use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    hubfs::process::logging::init();
    let cli = hubfs::commands::Cli::parse();
    match hubfs::commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hubfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
