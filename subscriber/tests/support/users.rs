//! Local users for the tests that need more than one (a publisher as one user and a subscriber as another, an
//! attacker beside a victim): created with `useradd` (system users, no home, no login shell), removed with
//! `userdel` when dropped. Only root can do that: [`LocalUser::create`] returns `None` and prints why otherwise,
//! and the test skips. Names carry the test process's pid, so parallel runs never share a user.
#![allow(dead_code)]

use std::process::Command;

/// A local user made for one test.
pub struct LocalUser {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group's gid.
    pub gid: u32,
}

fn id_of(flag: &str, name: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, name]).output().ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// Says a test skipped, on the process's stderr itself (not the test's captured output), so that `.ci/run` sees
/// the line and fails: CI runs as root with useradd, and these tests must run there.
fn skip(what: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIP local user: {what}");
}

impl LocalUser {
    /// Creates user `mdft-<tag>-<pid>` with a group of its own; `None`, with a line saying why, when this test
    /// cannot (not root, no useradd). `test` names the caller in the SKIP line.
    pub fn create(test: &str, tag: &str) -> Option<LocalUser> {
        if mdfan_fabric::shm::current_euid() != 0 {
            skip(&format!("{test}: creating a local user needs root (useradd)"));
            return None;
        }
        let name = format!("mdft-{tag}-{}", std::process::id());
        let _ = Command::new("userdel").arg(&name).output(); // a leftover of a crashed run with this pid
        let out = Command::new("useradd")
            .args(["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", &name])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                skip(&format!("{test}: useradd {name}: {}", String::from_utf8_lossy(&o.stderr).trim()));
                return None;
            }
            Err(e) => {
                skip(&format!("{test}: useradd: {e}"));
                return None;
            }
        }
        let (uid, gid) = (id_of("-u", &name)?, id_of("-g", &name)?);
        Some(LocalUser { name, uid, gid })
    }
}

impl Drop for LocalUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}
