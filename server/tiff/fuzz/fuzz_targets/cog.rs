//! Fuzz target: hostile bytes as a whole TIFF file through header parsing, block decoding
//! and pasting (`cogfeed_tiff::fuzz::exercise`). Run: `cargo fuzz run cog` from
//! `server/` (see the README, "Security").
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cogfeed_tiff::fuzz::exercise(data);
});
