//! The progress bar of long transfers (indicatif), on standard error only when it is
//! a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Transfers shorter than this get no bar.
const MIN_BAR_BYTES: u64 = 1024 * 1024;

/// A bar for a transfer of `len` bytes, hidden when `quiet`, when the transfer is
/// short, or when standard error is not a terminal.
pub(crate) fn bar(len: u64, quiet: bool) -> ProgressBar {
    if quiet || len < MIN_BAR_BYTES {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
    );
    if let Ok(style) = style {
        pb.set_style(style);
    }
    pb
}
