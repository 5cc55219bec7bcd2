//! Where the doctor reads from: the live host, or a recorded tree that stands in for it.
//!
//! Every check reads through a [`Source`], never `std::fs` directly, so a fixture tree under `tests/fixtures/NAME/`
//! (`sys/...`, `proc/...`, `cmd/...`) replaces the host in tests. The three things a tree cannot hold as plain
//! files are recorded beside it: the output of optional tools (`cmd/NAME.txt`, NAME being the argv with leading
//! dashes dropped and joined by '-', spaces and slashes also '-': `dcb -N app show dev eth0 dscp-prio` is
//! `cmd/dcb-N-app-show-dev-eth0-dscp-prio.txt`) and the free space of a folder (`cmd/statvfs<path with '/' as '-'>.txt`, two
//! numbers: bytes available to an unprivileged user and the filesystem's size).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Free space of a filesystem, as `statvfs(3)` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Bytes an unprivileged process may still allocate (`f_bavail * f_frsize`).
    pub avail_bytes: u64,
    /// The filesystem's size (`f_blocks * f_frsize`).
    pub total_bytes: u64,
}

/// What the checks may read.
pub trait Source {
    /// The text of the file at an absolute host path (`/proc/cmdline`), `None` if absent or unreadable.
    fn read(&self, path: &str) -> Option<String>;
    /// The names in a folder, sorted (numbers in numeric order), `None` if it is absent.
    fn list(&self, path: &str) -> Option<Vec<String>>;
    /// The standard output of a tool (`["dcb", "pfc", "show", "dev", "eth0"]`); `None` when the tool is absent,
    /// fails or prints nothing. A missing tool is never an error: the check says "unknown".
    fn command(&self, argv: &[&str]) -> Option<String>;
    /// Free space of the filesystem holding `path`; `None` if it cannot be asked.
    fn space(&self, path: &str) -> Option<Space>;

    /// [`Source::read`], trimmed.
    fn read_trim(&self, path: &str) -> Option<String> {
        self.read(path).map(|s| s.trim().to_owned())
    }
}

/// The host itself (`/`) or a recorded tree standing in for it.
#[derive(Debug, Clone)]
pub struct Rooted {
    root: PathBuf,
    live: bool,
}

impl Rooted {
    /// Reads under `root`. A root of `/` is the live host: tools are run and folders are `statvfs`'d; any other
    /// root is a recording, whose tools' output and free space come from its `cmd/` folder.
    pub fn new(root: impl Into<PathBuf>) -> Rooted {
        let root = root.into();
        let live = root == Path::new("/");
        Rooted { root, live }
    }

    /// Whether this is the live host.
    pub fn is_live(&self) -> bool {
        self.live
    }

    fn at(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    fn recorded(&self, name: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.root.join("cmd").join(format!("{name}.txt"))).ok()?;
        (!text.trim().is_empty()).then_some(text)
    }
}

/// The file name a recording keeps a tool's output under (see the module doc).
pub fn recorded_name(argv: &[&str]) -> String {
    let parts: Vec<String> = argv.iter().map(|a| a.trim_start_matches('-').replace([' ', '/'], "-")).collect();
    parts.join("-")
}

/// Sorts names with their numeric parts compared as numbers (`state2` before `state10`, IRQ 9 before 10).
fn natural_key(s: &str) -> (String, u64) {
    let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, num) = s.split_at(s.len() - digits);
    (stem.to_owned(), num.parse().unwrap_or(0))
}

impl Source for Rooted {
    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.at(path)).ok()
    }

    fn list(&self, path: &str) -> Option<Vec<String>> {
        let mut names: Vec<String> = std::fs::read_dir(self.at(path))
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        names.sort_by_key(|n| natural_key(n));
        Some(names)
    }

    fn command(&self, argv: &[&str]) -> Option<String> {
        if !self.live {
            return self.recorded(&recorded_name(argv));
        }
        let (tool, args) = argv.split_first()?;
        let out = Command::new(tool).args(args).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && !text.trim().is_empty()).then_some(text)
    }

    fn space(&self, path: &str) -> Option<Space> {
        if !self.live {
            let text = self.recorded(&format!("statvfs{}", path.replace('/', "-")))?;
            let mut nums = text.split_whitespace().map(str::parse::<u64>);
            return Some(Space { avail_bytes: nums.next()?.ok()?, total_bytes: nums.next()?.ok()? });
        }
        let st = nix::sys::statvfs::statvfs(path).ok()?;
        let frsize = st.fragment_size() as u64;
        Some(Space {
            avail_bytes: (st.blocks_available() as u64).saturating_mul(frsize),
            total_bytes: (st.blocks() as u64).saturating_mul(frsize),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{natural_key, recorded_name, Rooted, Source};

    #[test]
    fn the_live_host_answers_statvfs_and_a_recording_does_not_run_tools() {
        let live = Rooted::new("/");
        assert!(live.is_live());
        let tmp = std::env::temp_dir();
        let space = live.space(tmp.to_str().unwrap()).expect("statvfs of the temp dir");
        assert!(space.total_bytes > 0 && space.avail_bytes <= space.total_bytes, "{space:?}");
        // A recording without cmd/ has no tool output, even for a tool the host has.
        let recorded = Rooted::new(&tmp);
        assert!(!recorded.is_live());
        assert_eq!(recorded.command(&["ls", "/"]), None);
        assert_eq!(recorded.space("/dev/shm"), None);
    }

    #[test]
    fn recorded_names_drop_dashes_and_spaces() {
        assert_eq!(
            recorded_name(&["dcb", "-N", "app", "show", "dev", "eth0", "dscp-prio"]),
            "dcb-N-app-show-dev-eth0-dscp-prio"
        );
        assert_eq!(recorded_name(&["pmc", "-u", "-b", "0", "GET TIME_STATUS_NP"]), "pmc-u-b-0-GET-TIME_STATUS_NP");
    }

    #[test]
    fn numbers_sort_as_numbers() {
        let mut v = vec!["state10", "state2", "state1", "ptp0"];
        v.sort_by_key(|n| natural_key(n));
        assert_eq!(v, ["ptp0", "state1", "state2", "state10"]);
    }
}
