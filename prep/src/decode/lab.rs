//! LAB to RGB as Pillow 13.0.0's `Image.convert("RGB")` does it for a "LAB" image: through
//! Little CMS (2.19, the version Pillow's wheels bundle; `lcms2-sys` builds it from source),
//! `ImageCms.buildTransform(createProfile("LAB"), createProfile("sRGB"), "LAB", "RGB")`: a Lab
//! V2 profile with the default D50 white point (`cmsCreateLab2Profile(NULL)`) to lcms's built-in
//! sRGB, perceptual intent, no flags, pixels as Pillow stores them (L, a, b unsigned with 128
//! for zero, and a pad byte: `LabV2 | CHANNELS 3 | BYTES 1 | EXTRA 1`) into `TYPE_RGBA_8`.

use super::Fail;
use lcms2_sys as lcms;

/// Pillow's "LAB" pixel layout for lcms (`findLCMStype("LAB")`).
const LAB_X_8: u32 = (30 << 16) | (3 << 3) | 1 | (1 << 7);
/// `TYPE_RGBA_8`.
const RGBA_8: u32 = (4 << 16) | (3 << 3) | 1 | (1 << 7);

/// `lab`: 3 bytes per pixel (L, a + 128, b + 128); RGB out, 3 bytes per pixel.
pub(crate) fn to_rgb(lab: &[u8]) -> Result<Vec<u8>, Fail> {
    let n = lab.len() / 3;
    let input: Vec<u8> = lab
        .chunks_exact(3)
        .flat_map(|p| [p[0], p[1], p[2], 255])
        .collect();
    let mut out = vec![0u8; n * 4];
    // SAFETY: the profiles and the transform are created, used on buffers of `n` pixels of the
    // declared formats, and freed here.
    unsafe {
        let lab_p = lcms::cmsCreateLab2Profile(std::ptr::null());
        let srgb = lcms::cmsCreate_sRGBProfile();
        if lab_p.is_null() || srgb.is_null() {
            for p in [lab_p, srgb] {
                if !p.is_null() {
                    lcms::cmsCloseProfile(p);
                }
            }
            return Err(Fail::Unsupported(
                "Little CMS could not create the LAB or sRGB profile".into(),
            ));
        }
        let t = lcms::cmsCreateTransform(
            lab_p,
            lcms::PixelFormat(LAB_X_8),
            srgb,
            lcms::PixelFormat(RGBA_8),
            lcms::Intent::Perceptual,
            0,
        );
        lcms::cmsCloseProfile(lab_p);
        lcms::cmsCloseProfile(srgb);
        if t.is_null() {
            return Err(Fail::Unsupported(
                "Little CMS could not build the LAB to sRGB transform".into(),
            ));
        }
        if let Ok(n32) = u32::try_from(n) {
            lcms::cmsDoTransform(t, input.as_ptr().cast(), out.as_mut_ptr().cast(), n32);
        }
        lcms::cmsDeleteTransform(t);
    }
    Ok(out
        .chunks_exact(4)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect())
}
