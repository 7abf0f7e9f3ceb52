//! Fixed-width integers read out of a header: every header parser reads its fields through these
//! (`None` when the field runs past the end of the data, never a panic; `at` may be any value).

/// The `N` bytes at `at`, when they are all there.
fn field<const N: usize>(d: &[u8], at: usize) -> Option<[u8; N]> {
    d.get(at..at.checked_add(N)?)?.try_into().ok()
}

pub(crate) fn be16(d: &[u8], at: usize) -> Option<u16> {
    field(d, at).map(u16::from_be_bytes)
}

pub(crate) fn be32(d: &[u8], at: usize) -> Option<u32> {
    field(d, at).map(u32::from_be_bytes)
}

pub(crate) fn be64(d: &[u8], at: usize) -> Option<u64> {
    field(d, at).map(u64::from_be_bytes)
}

pub(crate) fn le64(d: &[u8], at: usize) -> Option<u64> {
    field(d, at).map(u64::from_le_bytes)
}

pub(crate) fn le16(d: &[u8], at: usize) -> Option<u16> {
    field(d, at).map(u16::from_le_bytes)
}

pub(crate) fn le32(d: &[u8], at: usize) -> Option<u32> {
    field(d, at).map(u32::from_le_bytes)
}

/// [`le16`] when `le`, else [`be16`] (TIFF and EXIF carry their byte order in the header).
pub(crate) fn rd16(d: &[u8], at: usize, le: bool) -> Option<u16> {
    if le { le16(d, at) } else { be16(d, at) }
}

/// [`le32`] when `le`, else [`be32`].
pub(crate) fn rd32(d: &[u8], at: usize, le: bool) -> Option<u32> {
    if le { le32(d, at) } else { be32(d, at) }
}

/// [`le64`] when `le`, else [`be64`] (BigTIFF).
pub(crate) fn rd64(d: &[u8], at: usize, le: bool) -> Option<u64> {
    if le { le64(d, at) } else { be64(d, at) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_orders_and_refuses_short_fields() {
        let d = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09];
        assert_eq!(be16(&d, 1), Some(0x0203));
        assert_eq!(le16(&d, 1), Some(0x0302));
        assert_eq!(be32(&d, 0), Some(0x0102_0304));
        assert_eq!(le32(&d, 5), Some(0x0908_0706));
        assert_eq!(be64(&d, 1), Some(0x0203_0405_0607_0809));
        assert_eq!(rd16(&d, 7, true), Some(0x0908));
        assert_eq!(rd32(&d, 2, false), Some(0x0304_0506));
        assert_eq!(rd64(&d, 0, true), Some(0x0807_0605_0403_0201));
        assert_eq!(le64(&d, 2), None);
        // the last byte alone, past the end, and an offset whose end overflows
        assert_eq!(le16(&d, 8), None);
        assert_eq!(be32(&d, 9), None);
        assert_eq!(be64(&d, 2), None);
        assert_eq!(rd32(&d, usize::MAX - 1, true), None);
        assert_eq!(be16(&d, usize::MAX), None);
    }
}
