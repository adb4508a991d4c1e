//! Compiles the dashboard's stylesheet at build time with encre-css, a Rust
//! implementation of Tailwind: it scans the app's sources for class names,
//! so the build needs no Node toolchain and no network. (tailwind-rs was
//! tried first and generates broken CSS; see shared/BUILD.md.)
//!
//! Output: `$OUT_DIR/baton.css`, which `src/dashboard.rs` serves as
//! `/pkg/baton.css`.

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

    let out = PathBuf::from(env::var("OUT_DIR")?).join("baton.css");
    fs::write(out, format!("{utilities}\n\n{base}"))?;
    Ok(())
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
