//! `glm5v`: the command line of the GLM-5.3-Flash vision tower port.
//!
//! Exit codes: 0 success, 1 a comparison or conformance check failed, 2 bad usage or bad input
//! (the message names the input), 3 a corpus run in which some inputs failed (their rows say why). Every output file is written to a temporary file next to its
//! destination and renamed into place, so a failed run never leaves a partial file.

mod backend;
mod cmd;
mod corpus;
mod inputs;
mod out;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "glm5v",
    version,
    about = "GLM-5.3-Flash vision tower in Rust: preprocess images, embed them, compare tap dumps",
    long_about = "GLM-5.3-Flash vision tower in Rust.\n\n\
        Turn images into the tower's inputs exactly as upstream's processor does (plan, prep), run the \
        tower on the CPU reference or the GPU (embed), make synthetic checkpoints (synth), compare tap \
        dumps tap by tap against upstream or another backend (diff, conformance), find the stage that \
        adds drift between two backends (bisect), and time it all against upstream (bench).\n\n\
        Exit codes: 0 ok, 1 a comparison failed, 2 usage or input error, 3 a corpus run (embed --out \
        X.parquet) in which some inputs failed."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Plan(cmd::plan::Args),
    Prep(cmd::prep::Args),
    Synth(cmd::synth::Args),
    Embed(cmd::embed::Args),
    Serve(cmd::serve::Args),
    Diff(cmd::diff::Args),
    Bisect(cmd::bisect::Args),
    Bench(cmd::bench::Args),
    Conformance(cmd::conformance::Args),
}

/// How a command ends when it does not succeed.
pub enum Failure {
    /// The work ran and its verdict is negative (exit 1); the report is already printed.
    Verdict,
    /// Bad usage or input, or the work could not run (exit 2).
    Error(anyhow::Error),
    /// A corpus run finished, but some inputs failed; their rows say why (exit 3).
    Partial,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Error(e.into())
    }
}

pub type CmdResult = Result<(), Failure>;

fn main() -> ExitCode {
    // A closed pipe ends the process as it ends other Unix tools (`glm5v diff a b | head`):
    // Rust ignores SIGPIPE, and every `println!` after the reader left would panic.
    #[cfg(unix)]
    // SAFETY: sets the default disposition of one signal before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // rav1d (AV1, inside AVIF) panics on some malformed streams by design; prep catches those
    // panics and answers a typed "corrupt" error naming the file, so their "thread panicked"
    // message is left unprinted. Any other panic prints as always.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !glm5v_prep::decoder_panic_is_caught(info.location()) {
            default_hook(info);
        }
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Plan(a) => cmd::plan::run(a),
        Command::Prep(a) => cmd::prep::run(a),
        Command::Synth(a) => cmd::synth::run(a),
        Command::Embed(a) => cmd::embed::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Diff(a) => cmd::diff::run(a),
        Command::Bisect(a) => cmd::bisect::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Conformance(a) => cmd::conformance::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Verdict) => ExitCode::from(1),
        Err(Failure::Partial) => ExitCode::from(3),
        Err(Failure::Error(e)) => {
            eprintln!("glm5v: error: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, joined by ": ", skipping a cause whose text the line
/// already holds (many error types print their source inside their own message).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}
