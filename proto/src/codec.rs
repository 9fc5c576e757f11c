//! The gRPC codec of every cogfeed service: prost's, except that the encoder sizes tonic's
//! buffer to the whole message before writing it.
//!
//! prost writes a message field by field into tonic's `BytesMut`, which grows as it goes: a
//! batch (tensors of tens of MiB) was reallocated and copied once per tensor, and each new
//! buffer's pages were faulted in again. perf on a cold epoch put 5–7 % of the daemon's CPU
//! in those copies and faults. One `reserve` of `encoded_len()` makes it one allocation
//! and one copy per message. Decoding is prost's, unchanged.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

/// [`Codec`] for `application/grpc+proto` whose encoder reserves the message's size first.
#[derive(Debug, Clone, Copy)]
pub struct SizedCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SizedCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SizedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = SizedEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        SizedEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(BufferSettings::default())
    }
}

/// Encodes `T` into a buffer reserved for all of it.
#[derive(Debug, Clone, Copy)]
pub struct SizedEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for SizedEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode(buf)
            .map_err(|e| Status::internal(format!("encoding a message: {e}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
