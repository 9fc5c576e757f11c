//! Progress on a terminal for long client commands: a bar with the rate and the time left
//! when the total is known, a spinner with the rate otherwise; nothing when stderr is not a
//! terminal (logs and pipes stay clean).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar over `total` steps of `unit` (None: unknown total).
pub fn bar(total: Option<u64>, unit: &str) -> ProgressBar {
    let pb = match total {
        Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
    };
    let template = match total {
        Some(_) => format!("{{bar:30}} {{pos}}/{{len}} {unit} {{per_sec}} ETA {{eta}} {{msg}}"),
        None => format!("{{spinner}} {{pos}} {unit} {{per_sec}} {{elapsed}} {{msg}}"),
    };
    if let Ok(style) = ProgressStyle::with_template(&template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}
