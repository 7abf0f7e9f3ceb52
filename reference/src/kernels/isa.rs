//! Which vector and matrix units the CPU kernels use: detected once per process, in one place.
//!
//! Levels, from the widest down: `amx` (AMX-TILE + AMX-BF16, and Linux granted the process the
//! tile state), `avx512-bf16` (AVX512-BF16), `avx512` (AVX-512F: the f32 panel kernel with its
//! 16-lane tile, and the skinny kernel), `avx2` (AVX2 + FMA, no AVX-512: AMD Zen 2/3, Intel before
//! Skylake-SP; the f32 panel kernel with its 8-lane tile, `kernels::panel::avx2`), `generic` (the
//! `gemm` crate and scalar loops). `GLM5V_CPU_ISA=<level>` forces a lower level, for tests
//! and for bisecting; a level above what the CPU has falls back to the CPU's own, with a warning.
//!
//! Linux gives a process the AMX tile registers only after it asks for them
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); without that the first tile
//! instruction faults. The request is made once, here, before any tile instruction runs; if it
//! is refused the level is `avx512-bf16` or lower (a normal fallback, not an error).

use std::sync::OnceLock;

/// A kernel level ([`isa`]); ordered, so `isa() >= Isa::Avx512` reads "has AVX-512F".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Neither AVX-512 nor AVX2 + FMA (or forced): the `gemm` crate's runtime-dispatched kernels
    /// and scalar loops.
    Generic,
    /// AVX2 and FMA, no AVX-512F: the f32 panel kernel on its 8-lane tile (`kernels::panel`).
    Avx2,
    /// AVX-512F: the f32 panel kernel (`kernels::panel`).
    Avx512,
    /// AVX-512F and AVX512-BF16 (`vdpbf16ps`); its products run on the f32 panels for now.
    Avx512Bf16,
    /// AMX-TILE and AMX-BF16 with the tile state granted: `tdpbf16ps` (`kernels::amx`).
    Amx,
}

impl Isa {
    /// Every level, lowest first.
    pub const ALL: [Isa; 5] = [
        Isa::Generic,
        Isa::Avx2,
        Isa::Avx512,
        Isa::Avx512Bf16,
        Isa::Amx,
    ];

    /// The name `GLM5V_CPU_ISA` takes and the bench prints.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Generic => "generic",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Bf16 => "avx512-bf16",
            Isa::Amx => "amx",
        }
    }

    /// The level named `s` (as [`Isa::name`] spells it; `avx512-f32` is accepted for `avx512`,
    /// `avx2-fma` for `avx2`).
    pub fn parse(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "generic" => Some(Isa::Generic),
            "avx2" | "avx2-fma" => Some(Isa::Avx2),
            "avx512" | "avx512-f32" | "avx512f" => Some(Isa::Avx512),
            "avx512-bf16" | "avx512bf16" => Some(Isa::Avx512Bf16),
            "amx" => Some(Isa::Amx),
            _ => None,
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What [`isa`] decided and why.
#[derive(Debug, Clone)]
pub struct IsaChoice {
    /// The level the kernels use.
    pub isa: Isa,
    /// The highest level this CPU and kernel allow.
    pub hardware: Isa,
    /// A problem with `GLM5V_CPU_ISA` (unknown name, or a level above the hardware), if any.
    pub warning: Option<String>,
    /// Whether `GLM5V_CPU_ISA` chose the level (a level it names and the hardware has).
    pub forced: bool,
}

static CHOICE: OnceLock<IsaChoice> = OnceLock::new();

/// The level the CPU kernels use in this process (detected on the first call; the tile state
/// is requested then).
pub fn isa() -> Isa {
    choice().isa
}

/// [`isa`] with the hardware level and any warning about `GLM5V_CPU_ISA`. The warning is
/// printed to stderr once, on the first call.
pub fn choice() -> &'static IsaChoice {
    CHOICE.get_or_init(|| {
        let hardware = hardware();
        let forced = std::env::var("GLM5V_CPU_ISA").ok();
        let c = decide(hardware, forced.as_deref());
        if let Some(w) = &c.warning {
            eprintln!("glm5v: {w}");
        }
        c
    })
}

/// The level for `hardware` and the value of `GLM5V_CPU_ISA` (`None`: unset).
pub fn decide(hardware: Isa, forced: Option<&str>) -> IsaChoice {
    let (isa, warning, forced) = match forced.map(str::trim).filter(|s| !s.is_empty()) {
        None => (hardware, None, false),
        Some(s) => match Isa::parse(s) {
            None => (
                hardware,
                Some(format!(
                    "GLM5V_CPU_ISA={s} is not one of generic, avx2, avx512, avx512-bf16, amx; \
                     using {hardware}"
                )),
                false,
            ),
            Some(want) if want > hardware => (
                hardware,
                Some(format!(
                    "GLM5V_CPU_ISA={s}: this CPU (or its kernel) runs at most {hardware}; using it"
                )),
                false,
            ),
            Some(want) => (want, None, true),
        },
    };
    IsaChoice {
        isa,
        hardware,
        warning,
        forced,
    }
}

/// Whether the bf16 mode's products run on the AVX512-BF16 kernel (`vdpbf16ps`) where the level
/// has it: on Intel CPUs (an AVX512-BF16 Xeon whose AMX is absent or hidden, as in many VMs)
/// `vdpbf16ps` runs at half the rate of the f32 FMAs (measured on a 2-core Emerald Rapids VM:
/// 85 against 170 GFLOP/s a core; its bf16 forwards 1.8x slower than f32's), so there the bf16
/// mode's products run on the f32 panels, its inputs rounded as before (the same roundings,
/// another summation order); on AMD's (Zen 4, Zen 5) it is the faster unit.
/// `GLM5V_CPU_DPBF16=1|0` decides instead, and so does `GLM5V_CPU_ISA=avx512-bf16` (a forced
/// level runs its own kernel). Decided once per process, from the vendor, never from a timing:
/// a process's choice, and so its bits, do not depend on how busy the machine was.
pub fn dpbf16_preferred() -> bool {
    static PREFERRED: OnceLock<bool> = OnceLock::new();
    *PREFERRED.get_or_init(|| {
        let c = choice();
        let forced_level = c.forced && c.isa == Isa::Avx512Bf16;
        let switch = std::env::var("GLM5V_CPU_DPBF16").ok();
        if let Some(v) = switch
            .as_deref()
            .filter(|v| !["0", "1"].contains(&v.trim()))
        {
            eprintln!("glm5v: GLM5V_CPU_DPBF16={v} is neither 1 nor 0; deciding by the CPU");
        }
        prefer_dpbf16(c.isa, switch.as_deref(), forced_level, &vendor())
    })
}

/// [`dpbf16_preferred`]'s rule: the level, `GLM5V_CPU_DPBF16`'s value, whether
/// `GLM5V_CPU_ISA` forced avx512-bf16, and the CPU's vendor string.
pub fn prefer_dpbf16(isa: Isa, switch: Option<&str>, forced_level: bool, vendor: &str) -> bool {
    if isa < Isa::Avx512Bf16 {
        return false;
    }
    match switch.map(str::trim) {
        Some("1") => true,
        Some("0") => false,
        _ => forced_level || vendor != "GenuineIntel",
    }
}

/// The CPU's vendor string (CPUID leaf 0: `GenuineIntel`, `AuthenticAMD`, ...), empty elsewhere.
pub fn vendor() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let l0 = std::arch::x86_64::__cpuid(0);
        let bytes: Vec<u8> = [l0.ebx, l0.edx, l0.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        String::new()
    }
}

/// The highest level this CPU supports, with the tile state requested for AMX.
fn hardware() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            return if avx2 { Isa::Avx2 } else { Isa::Generic };
        }
        // leaf 7 exists wherever AVX-512F does
        let l7 = std::arch::x86_64::__cpuid_count(7, 0);
        let l7_1 = std::arch::x86_64::__cpuid_count(7, 1);
        let amx_bf16 = l7.edx & (1 << 22) != 0;
        let amx_tile = l7.edx & (1 << 24) != 0;
        let avx512_bf16 = l7_1.eax & (1 << 5) != 0;
        if amx_bf16 && amx_tile && request_tile_state() {
            Isa::Amx
        } else if avx512_bf16 {
            Isa::Avx512Bf16
        } else {
            Isa::Avx512
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Isa::Generic
    }
}

/// Asks Linux for the AMX tile data state (`ARCH_REQ_XCOMP_PERM` for `XFEATURE_XTILEDATA`);
/// true when granted. Elsewhere (not Linux) false: AMX stays unused.
#[cfg(target_arch = "x86_64")]
fn request_tile_state() -> bool {
    #[cfg(target_os = "linux")]
    {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with these arguments only changes the process's permitted XSAVE
        // features; it reads and writes no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpbf16_is_preferred_off_intel_or_when_asked() {
        let amd = "AuthenticAMD";
        let intel = "GenuineIntel";
        assert!(prefer_dpbf16(Isa::Avx512Bf16, None, false, amd));
        assert!(!prefer_dpbf16(Isa::Avx512Bf16, None, false, intel));
        // asked for by the switch or by forcing the level
        assert!(prefer_dpbf16(Isa::Avx512Bf16, Some("1"), false, intel));
        assert!(prefer_dpbf16(Isa::Avx512Bf16, None, true, intel));
        assert!(!prefer_dpbf16(Isa::Avx512Bf16, Some("0"), true, amd));
        // AMX is above it (its own kernel); below it there is no such unit
        assert!(prefer_dpbf16(Isa::Amx, None, false, amd));
        assert!(!prefer_dpbf16(Isa::Avx512, Some("1"), false, amd));
        #[cfg(target_arch = "x86_64")]
        assert!(
            ["GenuineIntel", "AuthenticAMD", "HygonGenuine"].contains(&vendor().as_str())
                || !vendor().is_empty()
        );
    }

    #[test]
    fn names_round_trip() {
        for i in Isa::ALL {
            assert_eq!(Isa::parse(i.name()), Some(i));
        }
        assert_eq!(Isa::parse(" AVX512-F32 "), Some(Isa::Avx512));
        assert_eq!(Isa::parse("AVX2"), Some(Isa::Avx2));
        // lowest first, as the ordering reads
        assert!(Isa::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Isa::parse("sse"), None);
    }

    #[test]
    fn forcing_only_lowers() {
        let c = decide(Isa::Avx512, Some("amx"));
        assert_eq!(c.isa, Isa::Avx512);
        assert!(c.warning.unwrap().contains("at most avx512"));
        let c = decide(Isa::Amx, Some("avx512"));
        assert_eq!((c.isa, c.warning), (Isa::Avx512, None));
        let c = decide(Isa::Amx, Some("fast"));
        assert_eq!(c.isa, Isa::Amx);
        assert!(c.warning.unwrap().contains("GLM5V_CPU_ISA=fast"));
        let c = decide(Isa::Amx, Some("avx2"));
        assert_eq!((c.isa, c.warning), (Isa::Avx2, None));
        let c = decide(Isa::Avx2, Some("avx512"));
        assert_eq!(c.isa, Isa::Avx2);
        assert!(c.warning.unwrap().contains("at most avx2"));
        let c = decide(Isa::Avx2, Some("generic"));
        assert_eq!((c.isa, c.warning), (Isa::Generic, None));
        let c = decide(Isa::Amx, Some(""));
        assert_eq!((c.isa, c.warning), (Isa::Amx, None));
        // `forced`: only a level it names and the hardware has
        assert!(decide(Isa::Amx, Some("avx512-bf16")).forced);
        assert!(!decide(Isa::Avx512, Some("amx")).forced);
        assert!(!decide(Isa::Amx, Some("fast")).forced);
        assert!(!decide(Isa::Amx, None).forced);
    }

    /// On a CPU that lists AMX, the process gets the tile state (the CI machines do).
    #[test]
    fn amx_is_granted_where_the_cpu_lists_it() {
        let listed = std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| s.contains(" amx_bf16") && s.contains(" amx_tile"))
            .unwrap_or(false);
        if listed && std::env::var("GLM5V_CPU_ISA").is_err() {
            assert_eq!(choice().hardware, Isa::Amx);
        }
    }
}
