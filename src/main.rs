// As in the library: a block the compiler cannot check must say why it holds.
#![deny(clippy::undocumented_unsafe_blocks)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = hubfs::commands::Cli::parse();
    hubfs::process::logging::init_with(cli.log_format);
    match hubfs::commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hubfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
