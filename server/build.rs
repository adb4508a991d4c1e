//! Compiles the dashboard's stylesheet at build time with encre-css, a Rust
//! implementation of Tailwind: it scans the app's sources for class names,
//! so the build needs no Node toolchain and no network. (tailwind-rs was
//! tried first and generates broken CSS; see docs/architecture.md, "Design
//! choices".)
//!
//! Output: `$OUT_DIR/baton.css`, which `src/dashboard/mod.rs` serves
//! under a hashed name.
//!
//! It also embeds the dashboard's browser bundle (see `embed_site`) and
//! records the git commit for `baton --version`.

use std::{
    env, fs, io,
    path::{Path, PathBuf},
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.parent().ok_or("server/ has no parent")?;
    let app_src = root.join("app/src");
    let style = root.join("style");
    println!("cargo::rerun-if-changed={}", app_src.display());
    println!("cargo::rerun-if-changed={}", style.display());
    // `sqlx::migrate!` embeds the migrations when this crate compiles, but
    // on stable Rust it cannot ask Cargo to watch them: without this line
    // an added migration would not rebuild the binary that applies it.
    let migrations = root.join("migrations");
    println!("cargo::rerun-if-changed={}", migrations.display());

    let mut sources = Vec::new();
    collect_rs(&app_src, &mut sources)?;
    // A stable order keeps the output (and so the build) reproducible.
    sources.sort();
    let contents = sources
        .iter()
        .map(fs::read_to_string)
        .collect::<io::Result<Vec<_>>>()?;

    let config = encre_css::Config::from_file(style.join("encre-css.toml"))?;
    let utilities = encre_css::generate(contents.iter().map(String::as_str), &config);
    let base = fs::read_to_string(style.join("base.css"))?;

    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out_dir.join("baton.css"), format!("{utilities}\n\n{base}"))?;

    let release = env::var("PROFILE")? == "release";
    embed_site(root, &out_dir, release)?;
    record_commit(root)?;
    Ok(())
}

/// Writes `$OUT_DIR/site.rs`: the bundle `scripts/build-site.sh` left in
/// `target/site-release` (release builds) or `target/site` (debug), as
/// `include_bytes!` of files under `$OUT_DIR`, so the `baton` binary
/// serves its dashboard from inside itself wherever it is copied.
///
/// Release builds also store gzip and brotli copies compressed here, once,
/// at the highest settings, rather than on every request. The JS and wasm
/// get a content hash in their names so browsers may cache them forever.
/// Without a bundle the table is empty and the server says so at start.
fn embed_site(
    root: &Path,
    out_dir: &Path,
    release: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo::rerun-if-env-changed=BATON_EMBED_SITE");
    let site = match env::var_os("BATON_EMBED_SITE") {
        Some(dir) => PathBuf::from(dir),
        None => root.join(if release {
            "target/site-release"
        } else {
            "target/site"
        }),
    };
    // Watched as a directory (Cargo scans it): a path that does not exist
    // would make Cargo rerun this script, and rebuild the server, on every
    // build, so it is created empty until the bundle is built.
    fs::create_dir_all(&site)?;
    println!("cargo::rerun-if-changed={}", site.display());

    let js = site.join("pkg/baton.js");
    let wasm = site.join("pkg/baton.wasm");
    let mut files: Vec<(String, PathBuf, bool)> = Vec::new();
    let mut output_name = String::from("baton");
    if js.is_file() && wasm.is_file() {
        let (js_bytes, wasm_bytes) = (fs::read(&js)?, fs::read(&wasm)?);
        let hash = fnv1a(&wasm_bytes, fnv1a(&js_bytes, 0xcbf2_9ce4_8422_2325));
        output_name = format!("baton-{hash:016x}");
        files.push((format!("/pkg/{output_name}.js"), js, true));
        files.push((format!("/pkg/{output_name}.wasm"), wasm, true));
    }
    // The files of public/ that build-site.sh copied beside `pkg/`.
    for entry in fs::read_dir(&site)? {
        let path = entry?.path();
        if path.is_file() {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or("a file name is not UTF-8")?;
            files.push((format!("/{name}"), path, false));
        }
    }
    files.sort();

    let embedded = out_dir.join("site");
    fs::create_dir_all(&embedded)?;
    let mut table = String::from("&[\n");
    for (i, (url, path, immutable)) in files.iter().enumerate() {
        let bytes = fs::read(path)?;
        let raw = embedded.join(format!("{i}"));
        fs::write(&raw, &bytes)?;
        let (gzip, brotli) = if release && compressible(url) {
            let gz = embedded.join(format!("{i}.gz"));
            fs::write(&gz, gzip(&bytes)?)?;
            let br = embedded.join(format!("{i}.br"));
            fs::write(&br, brotli(&bytes)?)?;
            (include(&gz), include(&br))
        } else {
            ("None".to_owned(), "None".to_owned())
        };
        table.push_str(&format!(
            "    ::baton::dashboard::assets::Asset {{ path: {url:?}, content_type: {:?}, etag: \"\\\"{:016x}\\\"\", immutable: {immutable}, raw: include_bytes!({:?}), gzip: {gzip}, brotli: {brotli} }},\n",
            content_type(url),
            fnv1a(&bytes, 0xcbf2_9ce4_8422_2325),
            raw.display().to_string(),
        ));
    }
    table.push(']');
    fs::write(
        out_dir.join("site.rs"),
        format!("Site {{ output_name: {output_name:?}, assets: {table} }}\n"),
    )?;
    Ok(())
}

fn include(path: &Path) -> String {
    // An array reference would not coerce to a slice inside `Some`.
    format!(
        "Some(include_bytes!({:?}).as_slice())",
        path.display().to_string()
    )
}

/// Whether compressing pays: not for formats that are compressed already.
fn compressible(url: &str) -> bool {
    !url.ends_with(".png") && !url.ends_with(".ico") && !url.ends_with(".woff2")
}

fn content_type(url: &str) -> &'static str {
    match url.rsplit('.').next() {
        Some("js") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("txt") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

fn gzip(bytes: &[u8]) -> io::Result<Vec<u8>> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes)?;
    encoder.finish()
}

fn brotli(bytes: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: 11,
        lgwin: 22,
        ..Default::default()
    };
    brotli::BrotliCompress(&mut &bytes[..], &mut out, &params)?;
    Ok(out)
}

/// `baton --version` names the commit it was built from; a build outside
/// a git checkout says so instead.
fn record_commit(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let git = root.join(".git");
    // HEAD names the branch; its ref under refs/ (or packed-refs) the
    // commit. Only paths that exist are watched: Cargo reruns a script
    // whose watched path is missing on every build.
    for watched in ["HEAD", "packed-refs", "refs/heads"] {
        if git.join(watched).exists() {
            println!("cargo::rerun-if-changed={}", git.join(watched).display());
        }
    }
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let commit = match run(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) => format!("commit {commit}"),
        None => "built outside a git checkout".to_owned(),
    };
    println!("cargo::rustc-env=BATON_GIT_COMMIT={commit}");
    Ok(())
}

/// 64-bit FNV-1a, continuing from `hash`: a content hash for cache busting.
fn fnv1a(bytes: &[u8], hash: u64) -> u64 {
    bytes.iter().fold(hash, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn collect_rs(dir: &Path, found: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_rs(&path, found)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
    Ok(())
}
