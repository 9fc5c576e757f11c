//! Transparent huge pages, switched off for the whole process at start-up.
//!
//! mimalloc asks the kernel for transparent huge pages on its arenas (`MADV_HUGEPAGE`). The
//! daemon allocates and frees multi-megabyte buffers all the time (HTTP bodies, decoded
//! tiles, batches, tonic's encode buffer), and every first touch of a 2 MiB huge page makes
//! the kernel zero all of it. perf on a cold epoch (`client/bench/cold_path.py --perf`)
//! put 55 % of the daemon's CPU in `clear_page_erms` under `do_huge_pmd_anonymous_page`:
//! 15.7 CPU-s per GB delivered with huge pages, 7.2 without. `COGFEED_HUGE_PAGES=1` keeps them.

/// Turns transparent huge pages off for this process (unless `COGFEED_HUGE_PAGES=1`).
/// Returns whether they are off now; an error only means the kernel refused (not Linux, or
/// an old kernel), which costs speed, not correctness.
pub fn disable_transparent_huge_pages() -> std::io::Result<bool> {
    if std::env::var("COGFEED_HUGE_PAGES").is_ok_and(|v| v == "1") {
        return Ok(false);
    }
    #[cfg(target_os = "linux")]
    {
        rustix::thread::disable_transparent_huge_pages(true)?;
        Ok(true)
    }
    #[cfg(not(target_os = "linux"))]
    Ok(false)
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn the_flag_is_set_for_the_process() {
        assert!(super::disable_transparent_huge_pages().unwrap());
        assert!(rustix::thread::transparent_huge_pages_are_disabled().unwrap());
    }
}
