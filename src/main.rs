use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    hubfs::logging::init();
    let cli = hubfs::cli::Cli::parse();
    match hubfs::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hubfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
