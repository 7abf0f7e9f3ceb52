//! WebP through libwebp's `WebPAnimDecoder` with default options, the same path Pillow's
//! `_webp.c` takes for every WebP (still or animated): RGBA canvas, fancy upsampling, first
//! frame. Mode "RGBA" when `WebPGetFeatures` reports alpha, else "RGB" (the fourth byte ignored).

use super::Fail;
use super::modes::{Pixels, Raster, Transparency};
use libwebp_sys as w;

struct AnimDecoder(*mut w::WebPAnimDecoder);

impl Drop for AnimDecoder {
    fn drop(&mut self) {
        // SAFETY: created by WebPAnimDecoderNew, deleted once.
        unsafe { w::WebPAnimDecoderDelete(self.0) }
    }
}

pub(crate) fn decode(data: &[u8]) -> Result<Raster, Fail> {
    // SAFETY: plain C structs filled in by libwebp; `data` outlives the decoder.
    unsafe {
        let mut features: w::WebPBitstreamFeatures = std::mem::zeroed();
        let has_alpha = w::WebPGetFeatures(data.as_ptr(), data.len(), &mut features)
            == w::VP8StatusCode::VP8_STATUS_OK
            && features.has_alpha != 0;
        let webp_data = w::WebPData {
            bytes: data.as_ptr(),
            size: data.len(),
        };
        let dec = w::WebPAnimDecoderNew(&webp_data, std::ptr::null());
        if dec.is_null() {
            return Err(Fail::Corrupt("libwebp could not parse the file".into()));
        }
        let dec = AnimDecoder(dec);
        let mut info: w::WebPAnimInfo = std::mem::zeroed();
        if w::WebPAnimDecoderGetInfo(dec.0, &mut info) == 0 {
            return Err(Fail::Corrupt("libwebp could not read the canvas".into()));
        }
        let mut buf: *mut u8 = std::ptr::null_mut();
        let mut ts = 0;
        if w::WebPAnimDecoderGetNext(dec.0, &mut buf, &mut ts) == 0 || buf.is_null() {
            return Err(Fail::Corrupt(
                "libwebp could not decode the first frame (truncated or corrupt)".into(),
            ));
        }
        let (cw, ch) = (info.canvas_width, info.canvas_height);
        let n = cw as usize * ch as usize;
        let rgba = std::slice::from_raw_parts(buf, n * 4);
        let pixels = if has_alpha {
            Pixels::Rgba(rgba.to_vec())
        } else {
            Pixels::Rgb(
                rgba.chunks_exact(4)
                    .flat_map(|p| [p[0], p[1], p[2]])
                    .collect(),
            )
        };
        Ok(Raster {
            width: cw,
            height: ch,
            pixels,
            transparency: Transparency::None,
        })
    }
}
