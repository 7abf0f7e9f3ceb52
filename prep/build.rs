//! With the `video` feature: compiles `src/video/shim.c`, the small C ABI over the system's FFmpeg
//! libraries (libavformat, libavcodec, libavfilter, libswscale, libavutil, found with pkg-config)
//! that `src/video/ffmpeg.rs` wraps. Without it there is nothing to build: the default build needs
//! only cargo and a C compiler.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "video")]
    video();
}

#[cfg(feature = "video")]
fn video() {
    println!("cargo:rerun-if-changed=src/video/shim.c");
    let libs = [
        "libavformat",
        "libavcodec",
        "libavfilter",
        "libswscale",
        "libavutil",
    ];
    let probe = |lib: &str, emit: bool| {
        pkg_config::Config::new().cargo_metadata(emit).probe(lib).unwrap_or_else(|e| {
            panic!(
                "the `video` feature links the system's FFmpeg libraries, and pkg-config cannot find {lib}: \
                 {e}\ninstall them (Debian/Ubuntu: apt-get install pkg-config libavformat-dev libavcodec-dev \
                 libavfilter-dev libswscale-dev libavutil-dev) or build without --features video"
            )
        })
    };
    let mut build = cc::Build::new();
    build
        .file("src/video/shim.c")
        .warnings(true)
        .flag_if_supported("-std=c11");
    for lib in libs {
        for p in probe(lib, false).include_paths {
            build.include(p);
        }
    }
    build.compile("glm5v_video_shim");
    // after the shim, so that the linker sees the libraries after the archive that needs them
    for lib in libs {
        probe(lib, true);
    }
}
