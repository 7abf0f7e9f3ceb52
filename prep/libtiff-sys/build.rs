//! Compiles libtiff 4.7.2 (`third_party/libtiff/`, from the `libtiff-sys` 0.2.0 crate's copy of the libtiff
//! release; `config/` holds the configuration headers CMake would generate on Linux) and
//! `src/glue.c` into one static library. JPEG, zlib and liblzma come from `mozjpeg-sys`,
//! `libz-sys` and `lzma-sys`, each built from its crate's bundled sources: their include
//! folders arrive here as `DEP_JPEG_INCLUDE`, `DEP_Z_INCLUDE` and `DEP_LZMA_INCLUDE`.

use std::env;
use std::path::PathBuf;

const SOURCES: &[&str] = &[
    "tif_aux.c",
    "tif_close.c",
    "tif_codec.c",
    "tif_color.c",
    "tif_compress.c",
    "tif_dir.c",
    "tif_dirinfo.c",
    "tif_dirread.c",
    "tif_dirwrite.c",
    "tif_dumpmode.c",
    "tif_error.c",
    "tif_extension.c",
    "tif_fax3.c",
    "tif_fax3sm.c",
    "tif_flush.c",
    "tif_getimage.c",
    "tif_hash_set.c",
    "tif_jpeg.c",
    "tif_luv.c",
    "tif_lzma.c",
    "tif_lzw.c",
    "tif_next.c",
    "tif_ojpeg.c",
    "tif_open.c",
    "tif_packbits.c",
    "tif_pixarlog.c",
    "tif_predict.c",
    "tif_print.c",
    "tif_read.c",
    "tif_strip.c",
    "tif_swab.c",
    "tif_thunder.c",
    "tif_tile.c",
    "tif_unix.c",
    "tif_version.c",
    "tif_warning.c",
    "tif_write.c",
    "tif_zip.c",
];

fn main() {
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    // libtiff's own sources live apart from ours (third_party/libtiff/VENDORED.md).
    let libtiff = root.join("../../third_party/libtiff");
    let mut b = cc::Build::new();
    b.include(root.join("config")).include(&libtiff);
    for var in ["DEP_JPEG_INCLUDE", "DEP_Z_INCLUDE", "DEP_LZMA_INCLUDE"] {
        let paths = env::var_os(var).unwrap_or_else(|| panic!("{var} is not set"));
        for p in env::split_paths(&paths) {
            b.include(p);
        }
    }
    // lzma-sys builds liblzma statically: its header must not ask for dllimport.
    b.define("LZMA_API_STATIC", None);
    for s in SOURCES {
        b.file(libtiff.join(s));
    }
    b.file(root.join("src/glue.c"));
    b.warnings(false).compile("glm5v_tiff");
    println!("cargo:rerun-if-changed=../../third_party/libtiff");
    println!("cargo:rerun-if-changed=config");
    println!("cargo:rerun-if-changed=src/glue.c");
}
