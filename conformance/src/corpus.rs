//! The Pillow corpus as a conformance suite: every file of Pillow 13.0.0's `Tests/images` (its
//! sdist, from PyPI) through our prep, against upstream's verdict recorded in
//! `fixtures/corpus/corpus.json` (`fixtures/scripts/gen_corpus.py`:
//! `Glm5NextImageProcessor()(images=load_image(path))`, the sha256 of `pixel_values` or the
//! exception class).
//!
//! Each file gets one [`Outcome`]; [`CorpusReport::problems`] holds the suite to these rules:
//! - a file we accept gives upstream's grid and `pixel_values` digest (else [`Outcome::Differs`],
//!   or [`Outcome::OnlyWeAccept`] when upstream refuses it);
//! - a file upstream accepts in a format we read ([`READ_FORMATS`]) we accept (else
//!   [`Outcome::Refused`]);
//! - a refusal names the format or the defect: a file PIL identifies as a format we read is never
//!   "not a supported image" ([`PrepError::UnknownFormat`]);
//! - no panic, and the corpus file is the one upstream judged (its sha256).
//!
//! Known departures are listed, each with its outcome, in `conformance/corpus_known.tsv`
//! ([`Known`]): a listed file must show exactly its listed outcome, so the list can only shrink as
//! fixes land (a listed file that starts passing fails the suite until its line is removed).

use glm5v_prep::{DecodeOptions, ImageSource, PrepError, PrepOptions, load_image, prep_images};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// PIL format names (`Image.format`) of the files prep reads: MPO is a JPEG, APNG a PNG, PPM
/// the whole PNM family.
pub const READ_FORMATS: &[&str] = &[
    "PNG", "JPEG", "MPO", "WEBP", "GIF", "BMP", "TIFF", "QOI", "PPM", "TGA", "ICO", "CUR", "DDS",
    "PSD", "SGI", "PCX", "DCX", "SUN", "XBM", "XPM", "MSP", "IM", "IMT", "DIB", "JPEG2000", "ICNS",
    "AVIF", "SPIDER", "BLP", "FLI", "FITS", "FTEX", "GBR", "MCIDAS", "PCD", "PIXAR", "XVThumb",
];

/// `fixtures/corpus/corpus.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Corpus {
    pub sdist: Sdist,
    /// The images' folder inside the sdist, e.g. `pillow-13.0.0/Tests/images`.
    pub root: String,
    pub files: Vec<Entry>,
}

/// Where the corpus comes from.
#[derive(Debug, Clone, Deserialize)]
pub struct Sdist {
    /// `pillow==13.0.0`.
    pub requirement: String,
    pub file: String,
    pub sha256: String,
}

/// One corpus file and upstream's verdict on it.
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    /// Relative to [`Corpus::root`].
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
    /// `PIL.Image.open(path).format`; `None` when PIL cannot identify the file.
    pub pil_format: Option<String>,
    pub pil_mode: Option<String>,
    /// `ok` or `error`.
    pub verdict: String,
    pub grid: Option<[i64; 3]>,
    pub pixel_values_sha256: Option<String>,
    pub rgb_size: Option<[u32; 2]>,
    pub rgb_sha256: Option<String>,
    /// The exception class, or `Timeout` / `MemoryLimit` when the generator's bounds stopped it.
    pub error: Option<String>,
    pub message: Option<String>,
}

impl Entry {
    pub fn upstream_ok(&self) -> bool {
        self.verdict == "ok"
    }

    /// The generator's bounds stopped upstream: there is no upstream verdict to hold us to.
    pub fn no_verdict(&self) -> bool {
        matches!(self.error.as_deref(), Some("Timeout" | "MemoryLimit"))
    }

    /// The format column of the table.
    pub fn format(&self) -> &str {
        self.pil_format.as_deref().unwrap_or("(unidentified)")
    }

    pub fn in_read_format(&self) -> bool {
        self.pil_format
            .as_deref()
            .is_some_and(|f| READ_FORMATS.contains(&f))
    }
}

impl Corpus {
    pub fn parse(text: &str) -> Result<Corpus, String> {
        serde_json::from_str(text).map_err(|e| format!("corpus.json: {e}"))
    }

    pub fn load(path: &Path) -> Result<Corpus, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text)
    }
}

/// What one file did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Both accept; the same grid and `pixel_values`.
    Exact,
    /// Both accept; the values differ. `decode_equal`: whether our decoded RGB equals the RGB
    /// upstream resized (`None` when our `load_image` failed).
    Differs { decode_equal: Option<bool> },
    /// Upstream accepts, we refuse.
    Refused { error: String, named: bool },
    /// Both refuse.
    BothRefuse { error: String, named: bool },
    /// Upstream refuses, we accept.
    OnlyWeAccept,
    /// The generator's bounds stopped upstream (no verdict); ours is shown, not judged.
    NoVerdict,
    /// The file's sha256 is not the one upstream judged, or it is missing.
    BadFile(String),
    /// Our code panicked.
    Panic(String),
}

impl Outcome {
    /// The word used in the table and in `corpus_known.tsv`.
    pub fn key(&self) -> &'static str {
        match self {
            Outcome::Exact => "exact",
            Outcome::Differs { .. } => "differs",
            Outcome::Refused { .. } => "refused",
            Outcome::BothRefuse { .. } => "both-refuse",
            Outcome::OnlyWeAccept => "only-we-accept",
            Outcome::NoVerdict => "no-verdict",
            Outcome::BadFile(_) => "bad-file",
            Outcome::Panic(_) => "panic",
        }
    }

    fn detail(&self) -> String {
        match self {
            Outcome::Differs { decode_equal } => match decode_equal {
                Some(true) => "decoded RGB equals upstream's; processing differs".into(),
                Some(false) => "decoded RGB differs from upstream's".into(),
                None => "load_image failed where prep_images succeeded".into(),
            },
            Outcome::Refused { error, .. } | Outcome::BothRefuse { error, .. } => error.clone(),
            Outcome::BadFile(e) | Outcome::Panic(e) => e.clone(),
            _ => String::new(),
        }
    }
}

/// One file's result.
#[derive(Debug, Clone)]
pub struct FileResult {
    pub path: String,
    pub format: String,
    pub in_read_format: bool,
    pub upstream_ok: bool,
    pub outcome: Outcome,
}

/// `conformance/corpus_known.tsv`: `outcome<TAB>path<TAB>why` per line, `#` comments. An outcome
/// may name the builds it holds for, `outcome[no-jpeg-simd]`: a line for a JPEG decoder built
/// without libjpeg-turbo's SIMD paths (mozjpeg-sys found no nasm), where the file is exact
/// otherwise.
#[derive(Debug, Clone, Default)]
pub struct Known {
    pub entries: BTreeMap<String, (String, String)>,
    /// The lines for other builds than this one, as written (kept by [`CorpusReport::known_tsv`]).
    pub other_builds: Vec<String>,
}

/// The build condition a known line may carry.
const NO_JPEG_SIMD: &str = "[no-jpeg-simd]";

impl Known {
    /// The list for a build with libjpeg-turbo's SIMD JPEG paths.
    pub fn parse(text: &str) -> Result<Known, String> {
        Self::parse_for(text, true)
    }

    /// The list for a build with (`jpeg_simd`) or without the SIMD JPEG paths.
    pub fn parse_for(text: &str, jpeg_simd: bool) -> Result<Known, String> {
        let mut entries = BTreeMap::new();
        let mut other_builds = Vec::new();
        let mut paths = std::collections::BTreeSet::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.splitn(3, '\t');
            let (Some(outcome), Some(path)) = (parts.next(), parts.next()) else {
                return Err(format!(
                    "corpus_known.tsv line {}: expected `outcome<TAB>path<TAB>why`",
                    i + 1
                ));
            };
            let (outcome, applies) = match outcome.strip_suffix(NO_JPEG_SIMD) {
                Some(o) => (o, !jpeg_simd),
                None => (outcome, true),
            };
            let why = parts.next().unwrap_or("").to_string();
            if why.trim().is_empty() {
                return Err(format!(
                    "corpus_known.tsv line {}: {path} has no reason",
                    i + 1
                ));
            }
            if !ALLOWED_KNOWN.contains(&outcome) {
                return Err(format!(
                    "corpus_known.tsv line {}: outcome {outcome:?} is not one of {ALLOWED_KNOWN:?}",
                    i + 1
                ));
            }
            if !paths.insert(path.to_string()) {
                return Err(format!(
                    "corpus_known.tsv line {}: {path} is listed twice",
                    i + 1
                ));
            }
            if applies {
                entries.insert(path.to_string(), (outcome.to_string(), why));
            } else {
                other_builds.push(line.to_string());
            }
        }
        Ok(Known {
            entries,
            other_builds,
        })
    }
}

/// Outcomes a known-departures line may name.
const ALLOWED_KNOWN: &[&str] = &["differs", "refused", "only-we-accept", "unnamed"];

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn f32_sha256(v: &[f32]) -> String {
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a refusal names the format or the defect: everything but "not a supported image" for a
/// file PIL identifies.
fn named(e: &PrepError, entry: &Entry) -> bool {
    !(matches!(e, PrepError::UnknownFormat { .. }) && entry.pil_format.is_some())
}

/// Runs one corpus file through `prep_images` (what `glm5v prep` runs) and judges it.
pub fn run_file(images: &Path, entry: &Entry) -> Outcome {
    let path = images.join(&entry.path);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return Outcome::BadFile(format!("cannot read {}: {e}", path.display())),
    };
    let have = sha256_hex(&bytes);
    if have != entry.sha256 {
        return Outcome::BadFile(format!(
            "sha256 {have}, corpus.json says {} (not the file upstream judged)",
            entry.sha256
        ));
    }
    let src = ImageSource::Bytes {
        name: entry.path.clone(),
        bytes,
    };
    let ours = std::panic::catch_unwind(|| {
        prep_images(std::slice::from_ref(&src), &PrepOptions::default()).map(|b| {
            (
                b.image_grid_thw.first().copied(),
                f32_sha256(&b.pixel_values),
            )
        })
    });
    let ours = match ours {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Outcome::Panic(format!("prep_images panicked: {msg}"));
        }
    };
    if entry.no_verdict() {
        return Outcome::NoVerdict;
    }
    match (ours, entry.upstream_ok()) {
        (Ok((grid, sha)), true) => {
            if grid == entry.grid && Some(&sha) == entry.pixel_values_sha256.as_ref() {
                Outcome::Exact
            } else {
                let decode_equal = std::panic::catch_unwind(|| {
                    load_image(&src, &DecodeOptions::default()).ok().map(|img| {
                        Some([img.width(), img.height()]) == entry.rgb_size
                            && Some(sha256_hex(img.as_raw())) == entry.rgb_sha256
                    })
                })
                .ok()
                .flatten();
                Outcome::Differs { decode_equal }
            }
        }
        (Ok(_), false) => Outcome::OnlyWeAccept,
        (Err(e), true) => Outcome::Refused {
            named: named(&e, entry),
            error: e.to_string(),
        },
        (Err(e), false) => Outcome::BothRefuse {
            named: named(&e, entry),
            error: e.to_string(),
        },
    }
}

/// The whole corpus, on `threads` threads, in corpus order.
pub fn run(corpus: &Corpus, images: &Path, threads: usize) -> CorpusReport {
    let t0 = Instant::now();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<FileResult>>> = Mutex::new(vec![None; corpus.files.len()]);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(entry) = corpus.files.get(i) else {
                        break;
                    };
                    let outcome = run_file(images, entry);
                    let r = FileResult {
                        path: entry.path.clone(),
                        format: entry.format().to_string(),
                        in_read_format: entry.in_read_format(),
                        upstream_ok: entry.upstream_ok(),
                        outcome,
                    };
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                }
            });
        }
    });
    let files = results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
        .collect();
    CorpusReport {
        files,
        secs: t0.elapsed().as_secs_f64(),
    }
}

/// Every file's result.
#[derive(Debug, Clone)]
pub struct CorpusReport {
    pub files: Vec<FileResult>,
    pub secs: f64,
}

/// The rule a file breaks, as its `corpus_known.tsv` outcome; `None` when it keeps them all.
fn departure(r: &FileResult) -> Option<&'static str> {
    match &r.outcome {
        Outcome::Exact | Outcome::NoVerdict => None,
        Outcome::Differs { .. } => Some("differs"),
        Outcome::OnlyWeAccept => Some("only-we-accept"),
        Outcome::Refused { named: false, .. } | Outcome::BothRefuse { named: false, .. } => {
            Some("unnamed")
        }
        Outcome::Refused { .. } if r.in_read_format => Some("refused"),
        Outcome::Refused { .. } | Outcome::BothRefuse { .. } => None,
        Outcome::BadFile(_) | Outcome::Panic(_) => Some(r.outcome.key()),
    }
}

/// One row of the per-format table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub files: usize,
    pub upstream_ok: usize,
    pub exact: usize,
    pub differs: usize,
    pub refused: usize,
    pub only_we_accept: usize,
    pub both_refuse: usize,
    pub other: usize,
}

impl Counts {
    fn add(&mut self, r: &FileResult) {
        self.files += 1;
        self.upstream_ok += r.upstream_ok as usize;
        match r.outcome {
            Outcome::Exact => self.exact += 1,
            Outcome::Differs { .. } => self.differs += 1,
            Outcome::Refused { .. } => self.refused += 1,
            Outcome::OnlyWeAccept => self.only_we_accept += 1,
            Outcome::BothRefuse { .. } => self.both_refuse += 1,
            _ => self.other += 1,
        }
    }
}

impl CorpusReport {
    /// Per PIL format, plus the totals over formats we read and over everything.
    pub fn counts(&self) -> (BTreeMap<String, Counts>, Counts, Counts) {
        let mut per = BTreeMap::<String, Counts>::new();
        let (mut read, mut all) = (Counts::default(), Counts::default());
        for r in &self.files {
            per.entry(r.format.clone()).or_default().add(r);
            all.add(r);
            if r.in_read_format {
                read.add(r);
            }
        }
        (per, read, all)
    }

    /// The table: one row per format, then the totals.
    pub fn table(&self) -> String {
        let (per, read, all) = self.counts();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<16} {:>5} {:>6} {:>6} {:>7} {:>7} {:>9} {:>8} {:>5}",
            "format",
            "files",
            "up-ok",
            "exact",
            "differs",
            "refused",
            "we-only",
            "both-err",
            "other"
        );
        let row = |s: &mut String, name: &str, c: &Counts| {
            let _ = writeln!(
                s,
                "{:<16} {:>5} {:>6} {:>6} {:>7} {:>7} {:>9} {:>8} {:>5}",
                name,
                c.files,
                c.upstream_ok,
                c.exact,
                c.differs,
                c.refused,
                c.only_we_accept,
                c.both_refuse,
                c.other
            );
        };
        for (name, c) in &per {
            let mark = if READ_FORMATS.contains(&name.as_str()) {
                format!("{name} *")
            } else {
                name.clone()
            };
            row(&mut s, &mark, c);
        }
        row(&mut s, "formats read *", &read);
        row(&mut s, "all", &all);
        let _ = writeln!(
            s,
            "(* a format prep reads; up-ok: upstream accepts; exact: same grid and pixel_values; \
             we-only: upstream refuses, we accept; both-err: both refuse)"
        );
        s
    }

    /// `corpus_known.tsv` as this run would have it: every departure with its outcome, the reason
    /// kept from `known` where the outcome is unchanged, else this run's detail.
    pub fn known_tsv(&self, known: &Known) -> String {
        let mut s = String::new();
        for r in &self.files {
            let Some(bad) = departure(r) else { continue };
            let why = match known.entries.get(&r.path) {
                Some((k, why)) if k == bad => why.clone(),
                _ => match r.outcome.detail() {
                    d if d.is_empty() => format!("{} ({})", bad, r.format),
                    d => d.replace(&format!("{}: ", r.path), ""),
                },
            };
            let _ = writeln!(s, "{bad}\t{}\t{why}", r.path);
        }
        for line in &known.other_builds {
            let _ = writeln!(s, "{line}");
        }
        s
    }

    /// Every departure from the rules that `known` does not list with exactly that outcome, and
    /// every `known` line that is no longer true.
    pub fn problems(&self, known: &Known) -> Vec<String> {
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.files {
            let bad = departure(r);
            let listed = known.entries.get(&r.path);
            if listed.is_some() {
                seen.insert(r.path.clone());
            }
            match (bad, listed) {
                (None, None) => {}
                (Some(b), Some((k, _))) if b == k => {}
                (Some(b), None) => out.push(format!(
                    "{} [{}]: {b}: {}",
                    r.path,
                    r.format,
                    r.outcome.detail()
                )),
                (b, Some((k, why))) => out.push(format!(
                    "{} [{}]: listed in corpus_known.tsv as {k} ({why}) but is now {}{}: update the list",
                    r.path,
                    r.format,
                    b.unwrap_or(r.outcome.key()),
                    match r.outcome.detail() {
                        d if d.is_empty() => String::new(),
                        d => format!(" ({d})"),
                    }
                )),
            }
        }
        for path in known.entries.keys() {
            if !seen.contains(path) {
                out.push(format!(
                    "{path}: listed in corpus_known.tsv but not in the corpus"
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(path: &str, fmt: &str, upstream_ok: bool, outcome: Outcome) -> FileResult {
        FileResult {
            path: path.into(),
            format: fmt.into(),
            in_read_format: READ_FORMATS.contains(&fmt),
            upstream_ok,
            outcome,
        }
    }

    fn report() -> CorpusReport {
        let refused = |named| Outcome::Refused {
            error: "x".into(),
            named,
        };
        CorpusReport {
            files: vec![
                result("a.png", "PNG", true, Outcome::Exact),
                result(
                    "b.tif",
                    "TIFF",
                    true,
                    Outcome::Differs {
                        decode_equal: Some(false),
                    },
                ),
                result("c.tif", "TIFF", true, refused(true)),
                result("d.wmf", "WMF", true, refused(true)),
                result("e.wmf", "WMF", true, refused(false)),
                result("f.bmp", "BMP", false, Outcome::OnlyWeAccept),
            ],
            secs: 0.0,
        }
    }

    #[test]
    fn unlisted_departures_fail_and_refusals_outside_read_formats_pass() {
        let p = report().problems(&Known::default());
        assert_eq!(p.len(), 4, "{p:#?}");
        assert!(p[0].starts_with("b.tif [TIFF]: differs: decoded RGB differs"));
        assert!(p[1].starts_with("c.tif [TIFF]: refused"));
        assert!(p[2].starts_with("e.wmf [WMF]: unnamed"));
        assert!(p[3].starts_with("f.bmp [BMP]: only-we-accept"));
    }

    #[test]
    fn listed_departures_pass_only_with_their_exact_outcome() {
        let known = Known::parse(
            "# comment\n\
             differs\tb.tif\tJPEG-in-TIFF\n\
             refused\tc.tif\tplanar\n\
             unnamed\te.wmf\tWMF not read\n\
             only-we-accept\tf.bmp\tlenient\n",
        )
        .unwrap();
        assert_eq!(report().problems(&known), Vec::<String>::new());

        // A listed file that is now exact (or shows another outcome) fails until unlisted.
        let known =
            Known::parse("differs\ta.png\tonce wrong\nrefused\tb.tif\tonce refused\n").unwrap();
        let p = report().problems(&known);
        assert!(
            p.iter().any(
                |l| l.starts_with("a.png [PNG]: listed in corpus_known.tsv as differs")
                    && l.contains("now exact")
            ),
            "{p:#?}"
        );
        assert!(
            p.iter()
                .any(|l| l.starts_with("b.tif [TIFF]: listed") && l.contains("now differs")),
            "{p:#?}"
        );

        let known = Known::parse("differs\tgone.png\tremoved file\n").unwrap();
        assert!(
            report()
                .problems(&known)
                .iter()
                .any(|l| l == "gone.png: listed in corpus_known.tsv but not in the corpus")
        );
    }

    #[test]
    fn a_line_for_builds_without_jpeg_simd_holds_only_there() {
        let text = "refused[no-jpeg-simd]\tc.tif\tC IDCT\n";
        // Without SIMD it lists c.tif as refused: no problems.
        let known = Known::parse_for(text, false).unwrap();
        assert_eq!(known.entries["c.tif"].0, "refused");
        assert!(
            report()
                .problems(&known)
                .iter()
                .all(|l| !l.starts_with("c.tif"))
        );
        // With SIMD c.tif must be exact: its refusal is a problem, and the line is kept as written.
        let known = Known::parse_for(text, true).unwrap();
        assert!(known.entries.is_empty());
        assert!(
            report()
                .problems(&known)
                .iter()
                .any(|l| l.starts_with("c.tif [TIFF]: refused"))
        );
        assert!(report().known_tsv(&known).ends_with(text));
        assert!(
            Known::parse_for("refused[no-jpeg-simd]\ta.png\tw\ndiffers\ta.png\tw\n", true)
                .unwrap_err()
                .contains("listed twice")
        );
        assert!(
            Known::parse_for("exact[no-jpeg-simd]\ta.png\tw\n", false)
                .unwrap_err()
                .contains("not one of")
        );
    }

    #[test]
    fn known_list_syntax_is_checked() {
        assert!(
            Known::parse("differs\ta.png\n")
                .unwrap_err()
                .contains("no reason")
        );
        assert!(
            Known::parse("exact\ta.png\twhy\n")
                .unwrap_err()
                .contains("not one of")
        );
        assert!(
            Known::parse("differs\ta.png\tw\nrefused\ta.png\tw\n")
                .unwrap_err()
                .contains("listed twice")
        );
    }

    #[test]
    fn table_counts_per_format_and_totals() {
        let r = report();
        let (per, read, all) = r.counts();
        assert_eq!(per["TIFF"].differs, 1);
        assert_eq!(per["TIFF"].refused, 1);
        assert_eq!(per["WMF"].refused, 2);
        assert_eq!(
            (
                read.files,
                read.exact,
                read.upstream_ok,
                read.only_we_accept
            ),
            (4, 1, 3, 1)
        );
        assert_eq!((all.files, all.upstream_ok), (6, 5));
        let t = r.table();
        assert!(t.contains("TIFF *"), "{t}");
        assert!(t.lines().any(|l| l.starts_with("all ")), "{t}");
    }
}
