//! Replays the committed `cargo fuzz` corpus (`server/tiff/fuzz/corpus/cog`, seeds plus every
//! input the fuzzer kept, minimized) through the same entry point as the fuzz target: no
//! input may panic. Runs as an ordinary test, without a fuzzer or nightly Rust.

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

#[test]
fn every_corpus_input_ends_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/cog");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    inputs.sort();
    assert!(
        inputs.len() >= 30,
        "corpus at {} has {} inputs",
        dir.display(),
        inputs.len()
    );
    let mut decoded = 0;
    let mut panicked = Vec::new();
    for path in &inputs {
        // A running fuzzer may replace inputs under us.
        let Ok(data) = std::fs::read(path) else { continue };
        match std::panic::catch_unwind(|| cogfeed_tiff::fuzz::exercise(&data)) {
            Ok(n) => decoded += n,
            Err(_) => panicked.push(path.file_name().unwrap().to_string_lossy().into_owned()),
        }
    }
    assert!(panicked.is_empty(), "inputs that panic: {panicked:?}");
    // The seeds are valid files: the replay really decodes blocks.
    assert!(decoded > 50, "only {decoded} blocks decoded");
    eprintln!("{} corpus inputs, {decoded} blocks decoded", inputs.len());
}
