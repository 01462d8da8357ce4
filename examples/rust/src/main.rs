//! Q/K/V projections, an attention head, RoPE and multi-head attention for `qkv check
//! --command`, standard library only.
//!
//!     cargo build --offline --release
//!     qkv check --command target/release/qkv_projections

mod head;
mod json;
mod projections;
mod protocol;
mod rope_mha;
mod tensor;
mod wrap;

use std::io::{self, BufWriter};
use std::process::ExitCode;

use projections::QkvProjections;
use wrap::ValueUsesKeyWeight;

const USAGE: &str = "usage: qkv_projections [--wrong value-uses-key-weight|head-no-rowsum]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let input = io::stdin().lock();
    let output = BufWriter::new(io::stdout().lock());
    let served = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => protocol::serve::<QkvProjections>(input, output),
        ["--wrong", "value-uses-key-weight"] => protocol::serve::<ValueUsesKeyWeight>(input, output),
        ["--wrong", "head-no-rowsum"] => {
            head::NO_ROW_SUM.store(true, std::sync::atomic::Ordering::Relaxed);
            protocol::serve::<QkvProjections>(input, output)
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            // stderr, not stdout: qkv shows it when the check fails.
            eprintln!("qkv_projections: {message}");
            ExitCode::FAILURE
        }
    }
}
