//! DIB (a BMP without its 14-byte file header, as the Windows clipboard holds it), read as Pillow
//! 13.0.0's `DibImageFile` reads it: `BmpImageFile._bitmap` with a data offset of 0, that is, the
//! pixels right after the header, masks and palette. The bytes are read by `bmp.rs` behind a
//! file header whose offset is 0 (which `bmp.rs` reads as PIL reads it: "after the palette").
//! The 14 bytes keep every offset's parity, so RLE word alignment is unchanged.

use super::Fail;
use super::modes::Raster;

fn as_bmp(d: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(d.len() + 14);
    b.extend_from_slice(b"BM");
    b.extend_from_slice(&((d.len() + 14) as u32).to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(d);
    b
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    super::bmp::dims(&as_bmp(d))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    super::bmp::decode(&as_bmp(d), max_bytes)
}
