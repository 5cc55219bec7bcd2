//! Preflight in `mdfan-subscribe`: a ring that does not fit in `--shm-dir` (a 1 MiB tmpfs mounted by the test)
//! and a core this process may not use each stop the start with one line naming the value, before anything is
//! created: no SIGBUS, no ring file left, no connection made.

use std::process::Command;

fn subscribe(args: &[&str]) -> (Option<i32>, String) {
    // Nobody listens on port 9 (discard): preflight must stop the run before any connection is tried.
    let out = Command::new(env!("CARGO_BIN_EXE_mdfan-subscribe"))
        .args(["--connect", "127.0.0.1:9", "--name", "preflight"])
        .args(args)
        .output()
        .expect("mdfan-subscribe runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_ring_larger_than_the_shm_folder_is_refused_before_anything_is_created() {
    let dir = std::env::temp_dir().join(format!("mdfan-preflight-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        // CI runs as root and mounts it; elsewhere this needs root.
        eprintln!("SKIP a_ring_larger_than_the_shm_folder_is_refused_before_anything_is_created: cannot mount a tmpfs (not root)");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    // The default ring: 131,072 slots of 64 B plus the header and CQ = 9 MiB, in a 1 MiB folder.
    let (code, stderr) = subscribe(&["--shm-dir", dir.to_str().unwrap()]);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    let _ = Command::new("umount").arg(&dir).status();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "mdfan-subscribe: error: preflight host.shm: found 1 MiB free of 1 MiB; wanted {}: >= 9 MiB free (fix: ",
            dir.display()
        )),
        "{stderr}"
    );
    assert!(left.is_empty(), "no ring file left: {left:?}");
}

#[test]
fn a_core_this_process_may_not_use_is_refused_naming_it() {
    let (code, stderr) = subscribe(&["--core", "4096"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.starts_with("mdfan-subscribe: error: --core 4096: this process may run on cores ["), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn a_silence_timeout_of_0_ms_is_refused_naming_the_flag() {
    // It was taken, and the publisher reported silent between records: 644 `publisher_silent` lines in 5 s.
    let (code, stderr) = subscribe(&["--silence-timeout-ms", "0"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: invalid value '0' for '--silence-timeout-ms <SILENCE_TIMEOUT_MS>': 0 ms would report the publisher silent"
        ),
        "{stderr}"
    );
    let (code, stderr) = subscribe(&["--silence-timeout-ms", "1", "--core", "4096"]);
    assert_eq!(code, Some(2), "1 ms is taken (the run then stops at --core): {stderr}");
    assert!(stderr.starts_with("mdfan-subscribe: error: --core 4096: "), "{stderr}");
}
