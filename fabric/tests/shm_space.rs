//! A ring that does not fit in its folder (a 1 MiB tmpfs here; Docker's /dev/shm is 64 MiB) is refused when it is
//! created, naming the folder and the bytes needed and free, with no file left behind: never a SIGBUS later.
//! Mounting the tmpfs needs root (CI runs as root); elsewhere the test says SKIP.

use std::path::PathBuf;
use std::process::Command;

use mdfan_fabric::shm::{segment_bytes, ShmLocalRing};

struct SmallTmpfs(PathBuf);

impl SmallTmpfs {
    fn mount(size: &str) -> Option<SmallTmpfs> {
        let dir = std::env::temp_dir().join(format!("mdfan-small-shm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", dir.to_str()?])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(SmallTmpfs(dir))
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_ring_larger_than_its_folder_is_refused_at_creation_naming_the_bytes() {
    let Some(tmpfs) = SmallTmpfs::mount("1m") else {
        eprintln!("SKIP a_ring_larger_than_its_folder_is_refused_at_creation_naming_the_bytes: cannot mount a tmpfs");
        return;
    };
    let slots = 131_072;
    let err = ShmLocalRing::create(&tmpfs.0, slots).err().expect("an 8 MiB ring does not fit in 1 MiB").to_string();
    let needed = segment_bytes(slots);
    assert!(err.contains(&format!("the ring needs {needed} bytes and {} has ", tmpfs.0.display())), "{err}");
    assert!(err.contains(" bytes free"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&tmpfs.0).unwrap().collect();
    assert!(left.is_empty(), "no file left behind: {left:?}");
    // a ring that fits is fine there
    let (ring, _grant) = ShmLocalRing::create(&tmpfs.0, 1024).expect("a 72 KiB ring fits");
    drop(ring);
}
