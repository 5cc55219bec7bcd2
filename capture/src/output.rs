//! Writing an export file whole or not at all: beside the target as `FILE.partial.PID`, then linked into place
//! (which fails, never overwrites, when the target exists) and the partial file removed. An export killed
//! midway leaves its `FILE.partial.PID` behind (never `FILE`); the next one writes its own.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// Whether `out` can be written by [`write_new`]: it does not exist and its folder does (checked for every target
/// of an export before any is written, so that one refused leaves none written).
///
/// # Errors
/// As [`write_new`]'s first checks, naming the path.
pub fn check_new(out: &Path) -> Result<(), String> {
    if out.exists() {
        return Err(format!("{}: exists already (an export never overwrites a file)", out.display()));
    }
    // The folder first, so that the error names the file asked for, not the partial one.
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(format!("{}: no folder {} to write it in", out.display(), parent.display()));
    }
    Ok(())
}

/// Runs `write` on a new `out.partial.PID` and puts the file at `out` when it succeeds; removes it when not.
///
/// # Errors
/// `out` exists (before or after the write), the partial file cannot be created or linked, or `write`'s own
/// error; each names the path.
pub fn write_new<T>(out: &Path, write: impl FnOnce(File, &Path) -> Result<T, String>) -> Result<T, String> {
    let exists = || format!("{}: exists already (an export never overwrites a file)", out.display());
    check_new(out)?;
    let mut name = out.as_os_str().to_owned();
    name.push(format!(".partial.{}", std::process::id()));
    let partial = PathBuf::from(name);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&partial)
        .map_err(|e| format!("{}: cannot create: {e}", partial.display()))?;
    let done = write(file, &partial).and_then(|done| match std::fs::hard_link(&partial, out) {
        Ok(()) => Ok(done),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(exists()),
        Err(e) => Err(format!("{}: cannot link to {}: {e}", partial.display(), out.display())),
    });
    let _ = std::fs::remove_file(&partial);
    done
}
