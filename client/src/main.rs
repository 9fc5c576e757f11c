//! `cogfeed-client`: the command-line client of the cogfeed daemon.
//!
//! The daemon's gRPC protocol lands with the daemon issue; until then this binary only
//! reports its version, so the workspace layout (proto, server, client) is in place.

use clap::Parser;

#[derive(Parser)]
#[command(name = "cogfeed-client", version, about = "Client for the cogfeed batch server")]
struct Cli {}

fn main() {
    let _ = Cli::parse();
    println!(
        "cogfeed-client {}: no commands yet; the daemon protocol ships with `cogfeed serve`",
        env!("CARGO_PKG_VERSION")
    );
}
