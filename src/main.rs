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
            // One number per kind of failure (`hubfs --help` lists them); 1 for anything else.
            ExitCode::from(hubfs::process::exit::failure_of(&e).code())
        }
    }
}
