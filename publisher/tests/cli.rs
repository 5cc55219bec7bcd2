//! `mdfan-publisher` on bad input: each case is one line on stderr naming the file, line, key or endpoint,
//! a non-zero exit, and no panic.

use std::path::PathBuf;
use std::process::Command;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/cme-glbx-mdp3-es-mbo-dbn").join(name)
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("mdfan-publisher-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn config(dir: &std::path::Path, name: &str, feed: &std::path::Path, extra: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!(
            "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"dbn\"\npath = \"{}\"\n{extra}\n",
            feed.display()
        ),
    )
    .unwrap();
    p
}

/// Runs the publisher and returns (exit code, stderr).
fn run(config: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mdfan-publisher"))
        .args(["--config", config.to_str().unwrap()])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Starts the publisher with stdout and stderr piped and `RUST_LOG` set to `log`.
fn spawn_piped(config: &std::path::Path, log: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_mdfan-publisher"))
        .args(["--config", config.to_str().unwrap()])
        .env("RUST_LOG", log)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn assert_one_line_error(code: Option<i32>, stderr: &str, needles: &[&str]) {
    assert_eq!(code, Some(1), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "`{n}` not in: {stderr}");
    }
}

#[test]
fn a_missing_feed_file_is_named() {
    let dir = scratch();
    let cfg = config(&dir, "missing.toml", &dir.join("nope.dbn.zst"), "");
    let (code, err) = run(&cfg);
    assert_one_line_error(code, &err, &["mdfan-publisher: error: feed", "nope.dbn.zst"]);
}

#[test]
fn a_truncated_feed_file_stops_the_replay_with_its_record_and_byte_offset() {
    // The feed is streamed: the records before the cut go out (here to nobody: no subscriber is waited for), then
    // the run ends with the feed's error on stderr and exit 1.
    let dir = scratch();
    let z = std::fs::read(data("esh4-glbx-mdp3-20231224.mbo.dbn.zst")).unwrap();
    let feed = dir.join("truncated.dbn.zst");
    std::fs::write(&feed, &z[..z.len() * 2 / 3]).unwrap();
    let cfg = dir.join("truncated.toml");
    std::fs::write(
        &cfg,
        format!(
            "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 0\n\n[feed]\nformat = \"dbn\"\npath = \"{}\"\n",
            feed.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mdfan-publisher"))
        .args(["--config", cfg.to_str().unwrap()])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_one_line_error(
        out.status.code(),
        &err,
        &["truncated.dbn.zst: record ", " at byte ", " of the decompressed stream: ", "truncated"],
    );
    let replay = stdout.lines().find(|l| l.starts_with("replay records=")).expect("the run report");
    assert!(replay.ends_with(" end=feed_error"), "{replay}");
    // shm: no NIC clock, so no post-to-send-completion figure, and the line says so
    assert!(stdout.lines().any(|l| l == mdfan_publisher::CLOCKS_LINE_NO_NIC), "each figure's clock: {stdout}");
    assert_eq!(mdfan_publisher::CLOCKS_LINE_NO_NIC, "clocks cycle=tsc send_completion=nic:not_available");
    assert!(!stdout.contains("send_completion id="), "no session was stamped: {stdout}");
    let records: u64 = replay["replay records=".len()..].split(' ').next().unwrap().parse().unwrap();
    let record: u64 = err.split("record ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(records > 0 && records < 8_725, "the records before the cut: {replay}");
    assert_eq!(record, records + 1, "the error names the record after the last one replayed: {err}");
}

#[test]
fn a_corrupt_feed_file_is_named() {
    let dir = scratch();
    let feed = dir.join("corrupt.dbn");
    std::fs::write(&feed, b"DBN\x01\xff\xff\xff\x7fnot really").unwrap();
    let (code, err) = run(&config(&dir, "corrupt.toml", &feed, ""));
    assert_one_line_error(code, &err, &["corrupt.dbn"]);
}

#[test]
fn a_config_typo_or_bad_value_is_named_with_key_and_line() {
    let dir = scratch();
    for (name, line, needles) in [
        ("typo.toml", "pase = \"max\"", ["line 7: key feed.pase: ", "unknown field `pase`"]),
        ("fast.toml", "pace = \"fast\"", ["line 7: key feed.pace: ", "\"fast\""]),
    ] {
        let cfg = config(&dir, name, &data("esh4-glbx-mdp3-20231224.mbo.dbn.zst"), line);
        let (code, err) = run(&cfg);
        assert_one_line_error(code, &err, &[name, needles[0], needles[1]]);
    }
}

/// SIGUSR1 prints the counters marked as such, with the final report's names; SIGINT ends the replay with end of
/// stream, logs the shutdown and exits 130.
#[test]
fn sigusr1_prints_marked_counters_and_sigint_logs_the_shutdown() {
    use std::io::{BufRead, BufReader};
    let dir = scratch();
    let cfg = config(&dir, "signals.toml", &data("esh4-glbx-mdp3-20231225.mbo.dbn.zst"), "pace = 1");
    let mut child = spawn_piped(&cfg, "info");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = out.next().unwrap().unwrap();
    assert!(first.starts_with("publisher listening="), "{first}");
    let kill = |sig: &str| {
        let status = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap();
        assert!(status.success());
    };
    kill("USR1");
    let dump = out.next().unwrap().unwrap();
    assert!(dump.starts_with("counters replay records=0 cycle_p50_ns="), "{dump}");
    assert!(dump.ends_with(" end=running"), "{dump}");
    kill("INT");
    let rest: Vec<String> = out.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{rest:?} {err}");
    assert!(
        rest.iter().any(|l| l.starts_with("replay records=0 ") && l.ends_with(" end=publisher_shutdown")),
        "{rest:?}"
    );
    assert!(err.contains("stopped by SIGINT/SIGTERM"), "{err}");
}

/// A stdout that closes early (`mdfan-publisher ... | head -1`) ends the publisher with exit 141, as a shell
/// reports SIGPIPE, not with a panic.
#[test]
fn a_closed_stdout_pipe_is_a_quiet_exit_not_a_panic() {
    use std::io::{BufRead, BufReader};
    let dir = scratch();
    let cfg = config(&dir, "pipe.toml", &data("esh4-glbx-mdp3-20231225.mbo.dbn.zst"), "pace = 1");
    let mut child = spawn_piped(&cfg, "off");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("publisher listening="), "{first}");
    drop(out); // what `head -1` does after its line
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let code = child.wait().unwrap().code();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(code, Some(141), "the report went to a closed pipe: {err}");
}

#[test]
fn a_missing_config_file_is_named() {
    let (code, err) = run(std::path::Path::new("/nonexistent/mdfan.toml"));
    assert_one_line_error(code, &err, &["/nonexistent/mdfan.toml", "cannot read"]);
}

#[test]
fn an_endpoint_in_use_is_named() {
    let dir = scratch();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let p = dir.join("busy.toml");
    std::fs::write(
        &p,
        format!(
            "[publisher]\nlisten = \"{addr}\"\n\n[feed]\nformat = \"dbn\"\npath = \"{}\"\n",
            data("esh4-glbx-mdp3-20231224.mbo.dbn.zst").display()
        ),
    )
    .unwrap();
    let (code, err) = run(&p);
    assert_one_line_error(code, &err, &[&format!("control endpoint {addr}"), "cannot listen"]);
}

/// The largest journal the config allows (2^28 records, 32 GiB) on a host that cannot give it: one line naming the
/// key and the bytes, exit 1, not an allocator abort (SIGABRT). The address space is capped at 4 GiB (`ulimit -v`)
/// so that the allocation fails on any host, however much memory it has.
#[test]
fn a_journal_larger_than_the_host_can_allocate_is_named_with_its_key_and_bytes() {
    let dir = scratch();
    let cfg = config(
        &dir,
        "huge-journal.toml",
        &data("esh4-glbx-mdp3-20231224.mbo.dbn.zst"),
        "\n[journal]\nrecords = 268435456",
    );
    let out = Command::new("sh")
        .args(["-c", "ulimit -v 4194304 && exec \"$0\" --config \"$1\""])
        .args([env!("CARGO_BIN_EXE_mdfan-publisher"), cfg.to_str().unwrap()])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let (code, err) = (out.status.code(), String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        (code, err.as_ref()),
        (
            Some(1),
            "mdfan-publisher: error: journal.records = 268435456: cannot allocate the journal's 34359738368 bytes \
             (268435456 records x 128 B) on this host; lower [journal] records\n"
        )
    );
    assert!(out.stdout.is_empty(), "nothing was bound: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn a_bad_symbol_file_is_named_with_its_line_and_field() {
    let dir = scratch();
    let symbols = dir.join("symbols.csv");
    std::fs::write(
        &symbols,
        "security_id,symbol,display_factor,tick_size\n174969,6CZ6,0.0001,0.5\n17077,ESH4,one,0.25\n",
    )
    .unwrap();
    // A relative path is taken from the config file's folder.
    let cfg =
        config(&dir, "bad-symbols.toml", &data("esh4-glbx-mdp3-20231224.mbo.dbn.zst"), "symbols = \"symbols.csv\"");
    let (code, err) = run(&cfg);
    let want = format!(
        "mdfan-publisher: error: symbols {}: line 3: field display_factor: `one` is not a decimal number of at most 9 decimals, 0 or above (like 0.0001)",
        symbols.display()
    );
    assert_one_line_error(code, &err, &[&want]);
    let cfg = config(&dir, "no-symbols.toml", &data("esh4-glbx-mdp3-20231224.mbo.dbn.zst"), "symbols = \"nope.csv\"");
    let (code, err) = run(&cfg);
    let want = format!("mdfan-publisher: error: symbols {}: cannot read: ", dir.join("nope.csv").display());
    assert_one_line_error(code, &err, &[&want]);
}
