//! The `mdfan-feedsim` binary: its summary lines and exit codes.

use std::net::UdpSocket;
use std::process::Command;

const CAPTURE: &str = "../data/cme-mdp3-sbe-v8-pcap-20160927/Cme.Mdp3.Sbe.v8.1.Example.pcap";

fn feedsim() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mdfan-feedsim"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

#[test]
fn prints_a_summary_line_per_line_and_a_total() {
    // Bound but never read: the datagrams only need somewhere on loopback to go.
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dest = sink.local_addr().unwrap().to_string();
    let out = feedsim()
        .args(["--pcap", CAPTURE, "--send-a", &dest, "--send-b", &dest, "--speed", "0"])
        .args(["--loss-a", "0.02", "--seed", "13", "--drop-seqs", "17350000-17350039"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    // Seed 13 loses 100 of line A's packets at random, none inside the dropped range.
    let a = format!(
        "feedsim line=A group=224.0.31.11:14320 dest={dest} read=5000 sent=4860 dropped=140 dropped_by_seq=40 \
         duplicated=0 reordered=0"
    );
    assert_eq!(lines[0], a);
    assert!(lines[1].ends_with("read=5000 sent=4960 dropped=40 dropped_by_seq=40 duplicated=0 reordered=0"), "{text}");
    assert!(lines[2].starts_with("feedsim feed=mdp3 packets=10000 skipped=0 sent="), "{text}");
    assert!(lines[2].ends_with("end=complete"), "{text}");
}

/// SIGINT (and SIGTERM) stop the run: the summary lines are printed with `end=interrupted`, exit 130. At a
/// billionth of the recorded pace the capture's first datagram goes at once and the next one would wait for
/// hours: the signal is sent once the sink got that first datagram, so it always comes mid-run, while the
/// simulator waits to send the second.
#[test]
fn sigint_and_sigterm_stop_the_run_with_its_summary_and_exit_130() {
    for sig in ["INT", "TERM"] {
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dest = sink.local_addr().unwrap().to_string();
        let child = feedsim()
            .args(["--pcap", CAPTURE, "--send-a", &dest, "--send-b", &dest, "--speed", "0.000000001"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The capture's first packet (line B's; line A's first comes later in the capture).
        let mut buf = [0u8; 2048];
        sink.recv(&mut buf).unwrap();
        let status = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap();
        assert!(status.success());
        let out = child.wait_with_output().unwrap();
        let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!((out.status.code(), err.as_ref()), (Some(130), ""), "SIG{sig}: {text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "SIG{sig}: {text}");
        // Only that one: the packet it was waiting for when the signal came is not sent early.
        let tail = "read=5000 dropped=0 dropped_by_seq=0 duplicated=0 reordered=0";
        let tail = |sent| tail.replace(" dropped=", &format!(" sent={sent} dropped="));
        assert_eq!(lines[0], format!("feedsim line=A group=224.0.31.11:14320 dest={dest} {}", tail(0)));
        assert_eq!(lines[1], format!("feedsim line=B group=224.0.32.11:15320 dest={dest} {}", tail(1)));
        assert!(lines[2].starts_with("feedsim feed=mdp3 packets=10000 skipped=0 sent=1 "), "SIG{sig}: {text}");
        assert!(lines[2].ends_with(" end=interrupted"), "SIG{sig}: {text}");
    }
}

#[test]
fn a_missing_file_and_a_remote_destination_exit_1_naming_them() {
    let out = feedsim()
        .args(["--pcap", "no/such.pcap", "--send-a", "127.0.0.1:9", "--send-b", "127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("mdfan-feedsim: no/such.pcap: "), "{err}");
    let out =
        feedsim().args(["--pcap", CAPTURE, "--send-a", "192.0.2.1:9", "--send-b", "127.0.0.1:9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line A destination 192.0.2.1:9: only a multicast group"));
    let out = feedsim().args(["--pcap", CAPTURE, "--send-a", "127.0.0.1:9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "missing --send-b is a usage error");
}

#[test]
fn the_snapshot_feed_is_served_from_the_simulators_books_and_counted() {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dest = sink.local_addr().unwrap().to_string();
    let snapshot = UdpSocket::bind("127.0.0.1:0").unwrap();
    snapshot.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let snap = snapshot.local_addr().unwrap().to_string();
    let out = feedsim()
        .args(["--pcap", CAPTURE, "--send-a", &dest, "--send-b", &dest, "--speed", "0"])
        .args(["--snapshot", &snap, "--snapshot-interval-ms", "5", "--snapshot-linger-ms", "30"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let last = text.lines().nth(2).unwrap();
    let sent: u64 = last.rsplit_once(" recovery_sent=").expect("recovery_sent in the total").1.parse().unwrap();
    assert!(last.contains("end=complete") && sent > 0, "{text}");
    // The first packet of the first loop: MsgSeqNum 1, SnapshotFullRefresh38 messages only.
    let mut buf = [0u8; 2048];
    let n = snapshot.recv(&mut buf).unwrap();
    let mut templates = Vec::new();
    let h = mdfan_feed::mdp3::decode_snapshot_packet(&buf[..n], 0, |info, _| templates.push(info.template_id)).unwrap();
    assert_eq!(h.msg_seq_num, 1);
    assert!(!templates.is_empty() && templates.iter().all(|t| *t == 38));
    // A silent snapshot feed sends nothing; one off loopback is refused.
    let out = feedsim()
        .args(["--pcap", CAPTURE, "--send-a", &dest, "--send-b", &dest, "--speed", "0"])
        .args(["--snapshot", &snap, "--snapshot-silent", "--snapshot-linger-ms", "0"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).trim_end().ends_with("end=complete recovery_sent=0"));
    let out = feedsim()
        .args(["--pcap", CAPTURE, "--send-a", &dest, "--send-b", &dest, "--snapshot", "192.0.2.1:9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line snapshot destination 192.0.2.1:9: only a multicast group"), "{err}");
}

const ESH4: &str = "../data/cme-glbx-mdp3-es-mbo-dbn/esh4-glbx-mdp3-20231225.mbo.dbn.zst";

#[test]
fn a_dbn_file_plays_as_itch_over_moldudp64_on_both_lines() {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dest = sink.local_addr().unwrap().to_string();
    let retransmit = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let out = feedsim()
        .args(["--dbn", ESH4, "--itch-session", "TEST", "--itch-heartbeat-ms", "0", "--speed", "0"])
        .args(["--send-a", &dest, "--send-b", &dest, "--drop-seqs", "100-199"])
        .args(["--retransmit", &retransmit, "--retransmit-linger-ms", "0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(
        lines[0],
        "feedsim itch records=68792 messages=62574 last_seq=62574 packets=45517 price_unrepresentable=0 \
         unknown_order=7 skipped=1 ts_clamped=8725"
    );
    // The snapshot's Add Orders go 36 to a 1,400-byte packet (seqs 73..=108, ..., 181..=216): seqs 100..=199
    // touch 4 packets, dropped whole on each line.
    for (l, name) in lines[1..3].iter().zip(["A", "B"]) {
        assert!(l.starts_with(&format!("feedsim line={name} group=synthesised dest={dest} ")), "{text}");
        assert!(l.ends_with("read=45517 sent=45513 dropped=4 dropped_by_seq=4 duplicated=0 reordered=0"), "{text}");
    }
    assert!(lines[3].starts_with("feedsim feed=itch-moldudp64 packets=91034 skipped=0 sent=91026 "), "{text}");
    assert!(lines[3].ends_with("end=complete recovery_sent=0"), "{text}");
    // Line A alone (no --send-b): no line B in the summary.
    let out = feedsim()
        .args(["--dbn", ESH4, "--itch-session", "TEST", "--itch-heartbeat-ms", "0", "--speed", "0"])
        .args(["--send-a", &dest])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[1].starts_with(&format!("feedsim line=A group=synthesised dest={dest} read=45517 ")), "{text}");
    // Usage: --snapshot is MDP 3.0's; a retransmission server off loopback is refused.
    let out = feedsim().args(["--dbn", ESH4, "--send-a", &dest, "--snapshot", &dest]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = feedsim().args(["--dbn", ESH4, "--send-a", &dest, "--retransmit", "192.0.2.1:9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("retransmission server address 192.0.2.1:9: only a loopback address"), "{err}");
}

/// `--definitions` serves the symbol file's instruments as an MDP 3.0 definition loop (the summary counts its
/// packets); `--netns-multicast` from the namespace the test runs in is refused (exit 1, naming why): it is
/// only for an exchange namespace a test made.
#[test]
fn a_definition_loop_defines_the_symbol_files_instruments_and_namespace_routing_is_refused_here() {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let dest = sink.local_addr().unwrap().to_string();
    let lines = UdpSocket::bind("127.0.0.1:0").unwrap();
    let lines = lines.local_addr().unwrap().to_string();
    let out = feedsim()
        .args(["--pcap", CAPTURE, "--send-a", &lines, "--send-b", &lines, "--speed", "0"])
        .args([
            "--security-id-offset",
            "100",
            "--definitions",
            &dest,
            "--definitions-symbols",
            "../ops/mdp3-symbols.csv",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let sent: u64 = text.split("definitions_sent=").nth(1).and_then(|t| t.trim().parse().ok()).expect(&text);
    assert!(sent >= 1, "{text}");
    let mut buf = [0u8; 2048];
    let n = sink.recv(&mut buf).unwrap();
    let mut defs = Vec::new();
    mdfan_feed::mdp3::decode_definition_packet(&buf[..n], 0, |d| defs.push(d.instrument_def().unwrap())).unwrap();
    let want = mdfan_feed::symbols::load_symbol_file(std::path::Path::new("../ops/mdp3-symbols.csv")).unwrap();
    assert_eq!(
        defs,
        want.iter().cloned().collect::<Vec<_>>(),
        "the symbol file as written (the offset moves the capture's ids only)"
    );

    // A negative offset is bad usage.
    let out = feedsim()
        .args(["--pcap", CAPTURE, "--send-a", &lines, "--send-b", &lines, "--security-id-offset=-100"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));

    let out = feedsim()
        .args(["--pcap", CAPTURE, "--send-a", "239.255.0.1:9", "--send-b", "239.255.0.2:9", "--netns-multicast"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("multicast by the namespace's routes only from a network namespace of the test's own"),
        "{err}"
    );
}
