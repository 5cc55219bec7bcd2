//! Several local users on one host (issue 27): each test creates the users it needs (`useradd`, removed with
//! `userdel` at its end) and skips, saying why, when it cannot (not root).
//!
//! - Another user naming a victim's fresh ring file in its own `Subscribe` is refused every time, naming the
//!   ring's owner, and the victim's own subscribe then gets its ring (it won the race 5 times in 10 before).
//! - A publisher running as one user and a strategy as another meet over the publisher's Unix-domain socket (the
//!   ring passed as a file descriptor), exact; over TCP the strategy is refused with what to do instead.
//! - A counters file another user wrote is listed as suspect by `mdfan-stat` and never exported; a user allowed
//!   to read counters files (their group) reads them, read-only.

#[path = "support/mod.rs"]
mod common;
#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;
#[path = "support/users.rs"]
mod users;

use std::io::{BufRead as _, Write as _};
use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use mdfan_fabric::shm::{ShmLocalRing, DEFAULT_DIR};
use mdfan_fabric::CloseReason;
use mdfan_tuning::counters::{CountersWriter, MetricKind};
use mdfan_wire::control::{self, Bye, ControlMsg, RingGrant, SlowConsumerPolicy, Subscribe};
use users::LocalUser;

/// Where the attacker's half of the hijack test finds the publisher.
const ATTACKER_ENDPOINT: &str = "MDFAN_TEST_ATTACKER_ENDPOINT";

fn subscribe(name: &str, ring: RingGrant) -> ControlMsg {
    ControlMsg::Subscribe(Subscribe { policy: SlowConsumerPolicy::Resync, ..Subscribe::new(name, ring) })
}

/// A folder of this test's own, `mode`, owned by root.
fn folder(tag: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("mdfan-users-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    dir
}

/// Issue 27's ring hijack: a local user that names a victim's freshly created ring file in its own `Subscribe`
/// won the race 5 times in 10, and the victim was then refused (`already attached`). Here the attacker, another
/// local user, names each of 100 fresh rings before their owner does: refused 100 times out of 100 with the
/// reason naming the owner, and each time the owner's own subscribe then gets its ring. The subscribers that
/// follow get the whole replay, exact.
#[test]
fn another_local_user_naming_a_fresh_ring_is_refused_every_time_naming_the_owner() {
    let Some(att) = LocalUser::create("the hijack test", "att") else { return };
    let publisher = start_publisher_with(&esh4::main_file(), 2, "max_subscribers = 128", "");
    let addr = publisher.addr;
    let mut attacker = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "attacker", "--ignored", "--nocapture", "--test-threads=1"])
        .env(ATTACKER_ENDPOINT, addr.to_string())
        .uid(att.uid)
        .gid(att.gid)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to = attacker.stdin.take().unwrap();
    let mut from = std::io::BufReader::new(attacker.stdout.take().unwrap()).lines();
    for i in 0..100 {
        let (mut ring, grant) = ShmLocalRing::create(Path::new(DEFAULT_DIR), 64).unwrap();
        let RingGrant::Shm { path, .. } = &grant else { unreachable!() };
        writeln!(to, "{path}").unwrap();
        let answer = loop {
            // (libtest's own `test attacker ... ` may start the first line)
            let line = from.next().expect("the attacker answers").unwrap();
            if let Some(at) = line.find("ANSWER ") {
                break line[at + "ANSWER ".len()..].to_owned();
            }
        };
        let want = format!(
            "reject field ring: ring {path}: owned by uid 0 (root), but the subscriber asking for it is uid {} ({}): a \
             ring is attached only for its owner",
            att.uid, att.name
        );
        assert_eq!(answer, want, "try {i}");
        // the owner's own subscribe, with the same ring
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        control::write_msg(&mut s, &subscribe(&format!("victim-{i}"), grant)).unwrap();
        match control::read_msg(&mut s).unwrap() {
            ControlMsg::Accept(_) => {}
            other => panic!("try {i}: the ring's owner was refused its own ring: {other:?}"),
        }
        ring.unlink();
        // leave, and wait for the publisher's bye: its removal reaches the hot loop before the next one's arrival
        control::write_msg(&mut s, &ControlMsg::Bye(Bye::new(CloseReason::PeerGone))).unwrap();
        loop {
            if let ControlMsg::Bye(_) = control::read_msg(&mut s).unwrap() {
                break;
            }
        }
    }
    drop(to);
    assert!(attacker.wait().unwrap().success());
    let (a, b) = (spawn_subscriber(addr, "a", &[]), spawn_subscriber(addr, "b", &[]));
    assert_clean(&finished_lines(a), "a");
    assert_clean(&finished_lines(b), "b");
    let report = publisher.handle.join().unwrap().unwrap();
    assert_eq!(report.sessions.len(), 102);
    assert_eq!(report.sessions.iter().filter(|s| s.end == Some(CloseReason::PeerGone)).count(), 100);
}

/// The attacker's half of [`another_local_user_naming_a_fresh_ring_is_refused_every_time_naming_the_owner`],
/// run by it as another local user: for each ring path read from stdin, a subscribe naming it, and the answer on
/// stdout (`ANSWER reject <reason>` or `ANSWER accept`).
#[test]
#[ignore = "the attacker's half of the hijack test, which runs it as another local user"]
fn attacker() {
    let Ok(endpoint) = std::env::var(ATTACKER_ENDPOINT) else { return };
    for line in std::io::stdin().lines() {
        let path = line.unwrap();
        let mut s = TcpStream::connect(&endpoint).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        control::write_msg(&mut s, &subscribe("attacker", RingGrant::Shm { path, slot_count: 64 })).unwrap();
        match control::read_msg(&mut s).unwrap() {
            ControlMsg::Reject(r) => println!("ANSWER reject {}", r.reason),
            ControlMsg::Accept(_) => println!("ANSWER accept"),
            other => println!("ANSWER {}", other.kind()),
        }
    }
}

/// Issue 27, item 6: a publisher as one user and a strategy as another could not meet (`refused: open
/// /dev/shm/mdfan-ring-...: Permission denied`, and nothing said what to do). Here, over TCP, the refusal says
/// it; over the publisher's Unix-domain socket the ring travels as a file descriptor and the strategy gets the
/// whole replay, exact. (The strategy runs with the publisher's group, as `SupplementaryGroups=mdfan` gives it:
/// the socket is 0660.)
#[test]
fn a_publisher_and_a_strategy_running_as_two_users_meet_over_the_unix_socket() {
    let Some(pubu) = LocalUser::create("the two-users test", "pub") else { return };
    let Some(strat) = LocalUser::create("the two-users test", "strat") else { return };
    let dir = folder("two", 0o755);
    std::os::unix::fs::chown(&dir, Some(pubu.uid), Some(pubu.gid)).unwrap();
    let sock = dir.join("publisher.sock");
    let port = free_port();
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:{port}\"\nlisten_unix = {sock:?}\nwait_for_subscribers = 1\ncounters_dir = \"\"\nhot_idle = \"yield\"\n\n[feed]\nformat = \"dbn\"\npath = {:?}\n",
        esh4::main_file()
    );
    let cfg = dir.join("publisher.toml");
    std::fs::write(&cfg, text).unwrap();
    let child = Command::new(bin("mdfan-publisher"))
        .args(["--config", cfg.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .uid(pubu.uid)
        .gid(pubu.gid)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut publisher = Watched::new(child);
    publisher.wait_for_line("publisher listening=");
    let publisher_uid = pubu.uid.to_string();
    // A publisher running as a user that is neither root, the strategy's, nor `mdfan` is refused before the
    // strategy sends it anything (its token, its ring: another local user may listen where the publisher is
    // expected, breaker): over TCP (the owner of its socket) and over its Unix-domain socket (SO_PEERCRED).
    for endpoint in [format!("127.0.0.1:{port}"), format!("unix:{}", sock.display())] {
        let refused = wait_with_watchdog(
            Command::new(bin("mdfan-subscribe"))
                .args(["--connect", &endpoint, "--name", "wary", "--idle", "yield"])
                .uid(strat.uid)
                .gid(pubu.gid)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let err = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{endpoint}: {err}");
        let want = format!(
            "publisher {endpoint}: it runs as uid {}, which is neither root, you (uid {}), user mdfan, nor the \
             publisher_uid configured: nothing sent to it",
            pubu.uid, strat.uid
        );
        assert!(err.contains(&want), "{endpoint}: {err}");
    }
    let strategy = |endpoint: &str, name: &str| {
        Command::new(bin("mdfan-subscribe"))
            .args(["--connect", endpoint, "--name", name, "--idle", "yield", "--publisher-uid", &publisher_uid])
            .uid(strat.uid)
            .gid(pubu.gid)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let tcp = wait_with_watchdog(strategy(&format!("127.0.0.1:{port}"), "over-tcp"));
    let err = String::from_utf8_lossy(&tcp.stderr);
    assert_eq!(tcp.status.code(), Some(1), "{err}");
    let want = format!(
        "open: Permission denied (os error 13): the publisher runs as uid {} ({}) and the ring is its owner's alone \
         (mode 0600); a subscriber running as another user connects to the publisher's Unix-domain socket \
         (publisher.listen_unix; `--connect unix:PATH`), which passes the ring itself",
        pubu.uid, pubu.name
    );
    assert!(err.contains(&want), "{err}");
    let unix = wait_with_watchdog(strategy(&format!("unix:{}", sock.display()), "strat"));
    let lines = stdout_lines(&unix);
    assert_eq!(unix.status.code(), Some(0), "{lines:?}\n{}", String::from_utf8_lossy(&unix.stderr));
    assert_clean(&lines, "strat");
    let (code, out, err) = publisher.finish();
    assert_eq!(code, Some(0), "{out:?}\n{err}");
    assert!(
        out.iter().any(|l| l.starts_with("subscriber id=1 name=strat ") && l.ends_with(" end=end_of_stream")),
        "{out:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 27's counters breaks: `mdfan-stat` trusted any `mdfan-*.counters` file (another user's injected
/// `mdfan_session_lag{...} 999999` into `--prometheus`), and opened them read-write (a user allowed to read them
/// got `Permission denied`). Here another user's file in a shared (sticky) folder is listed as suspect, with the
/// reason, and none of its rows is exported; the trusted file is; and a user in the files' group reads them.
#[test]
fn a_counters_file_another_user_wrote_is_suspect_and_never_exported() {
    let Some(forger) = LocalUser::create("the forged-counters test", "forge") else { return };
    let dir = folder("counters", 0o1777);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let write = |file: &str, lag: u64| {
        let mut w = CountersWriter::create(&dir.join(file), "publisher", "127.0.0.1:7720", 4).unwrap();
        w.begin();
        w.set("mdfan_session_lag", "session=\"1\",subscriber=\"a\"", MetricKind::Gauge, lag);
        w.commit(now);
        w
    };
    let real = write("mdfan-publisher-127.0.0.1_7720.counters", 117);
    let forged = write("mdfan-publisher-127.0.0.1_7721.counters", 999_999);
    std::os::unix::fs::chown(forged.path(), Some(forger.uid), Some(forger.gid)).unwrap();
    let stat = |args: &[&std::ffi::OsStr]| Command::new(bin("mdfan-stat")).args(args).output().unwrap();
    let out = stat(&["--prometheus".as_ref(), "--dir".as_ref(), dir.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(
            "mdfan_session_lag{role=\"publisher\",instance=\"127.0.0.1:7720\",session=\"1\",subscriber=\"a\"} 117\n"
        ),
        "{text}"
    );
    assert!(!text.contains("999999"), "a forged row was exported:\n{text}");
    let suspect = forged.path().display().to_string();
    assert!(text.contains(&format!("mdfan_counters_suspect{{file=\"{suspect}\"}} 1\n")), "{text}");
    // one owned by another user, outside group mdfan, is suspect from its metadata, before it is read (a
    // publisher's file of a group mdfan member is suspect once read: the tuning crate's tests)
    let why = format!(
        "owned by uid {} (group {}), which is neither root, you (uid 0), nor group mdfan",
        forger.uid, forger.gid
    );
    let table = stat(&["--dir".as_ref(), dir.as_os_str()]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains(&format!("suspect file={suspect}: {why} (not shown)")), "{table}");
    assert!(table.contains("publisher 127.0.0.1:7720 pid="), "{table}");
    let named = stat(&[forged.path().as_os_str()]);
    assert_eq!(named.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&named.stderr).contains(&format!("{suspect}: suspect: {why}")));
    // a reader in the file's group (as group mdfan is meant to be) reads it: opened read-only
    std::os::unix::fs::chown(real.path(), None, Some(forger.gid)).unwrap();
    let as_reader = Command::new(bin("mdfan-stat"))
        .arg("--prometheus")
        .arg(real.path())
        .uid(forger.uid)
        .gid(forger.gid)
        .output()
        .unwrap();
    assert_eq!(as_reader.status.code(), Some(0), "{}", String::from_utf8_lossy(&as_reader.stderr));
    assert!(String::from_utf8_lossy(&as_reader.stdout).contains("session=\"1\",subscriber=\"a\"} 117\n"));
    drop((real, forged));
    std::fs::remove_dir_all(&dir).unwrap();
}
