//! Generates the `cogfeed.v1` messages and services from `cogfeed/v1/feed.proto` (Feed)
//! and `cogfeed/v1/peer.proto` (Peer, between replicas) with a
//! vendored `protoc` (no system install needed). `bytes` fields are `bytes::Bytes`, so
//! tensors are sent and received without copying. Services use `codec::SizedCodec`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    config.bytes(["."]);
    tonic_prost_build::configure()
        .codec_path("crate::codec::SizedCodec")
        .file_descriptor_set_path(out.join("cogfeed_v1_descriptor.bin"))
        .compile_with_config(config, &["cogfeed/v1/feed.proto", "cogfeed/v1/peer.proto"], &["."])?;
    println!("cargo:rerun-if-changed=cogfeed/v1/feed.proto");
    println!("cargo:rerun-if-changed=cogfeed/v1/peer.proto");
    Ok(())
}
