//! The doctor on recorded hosts (tests/fixtures/README.md says what each tree is and where each file's format
//! comes from): one verdict table per fixture, exact `found` values where a parse could go wrong, the binary's
//! table, exit code and `--json` round trip.

use std::path::PathBuf;
use std::process::Command;

use mdfan_doctor::checks::{all, preflight};
use mdfan_doctor::{exit_code, Finding, Inputs, Rooted, Verdict};
use Verdict::{Fail, Pass, Unknown, Warn};

fn root(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn run(name: &str, inputs: &Inputs) -> Vec<Finding> {
    all(&Rooted::new(root(name)), inputs)
}

fn table(findings: &[Finding]) -> Vec<(&str, Verdict)> {
    findings.iter().map(|f| (f.id.as_str(), f.verdict)).collect()
}

fn found<'a>(findings: &'a [Finding], id: &str) -> &'a str {
    &findings.iter().find(|f| f.id == id).unwrap_or_else(|| panic!("no finding {id}")).found
}

const MIB_64: u64 = 64 << 20;

fn tuned_inputs() -> Inputs {
    Inputs { hot_cores: vec![2, 3], ring_bytes: Some(MIB_64), traffic_class: 104, ..Inputs::default() }
}

fn untuned_inputs() -> Inputs {
    Inputs { hot_cores: vec![4, 5], ring_bytes: Some(MIB_64), traffic_class: 0, ..Inputs::default() }
}

fn vm_inputs() -> Inputs {
    Inputs { netdev: Some("enp1s0".to_owned()), ..Inputs::default() }
}

#[test]
fn a_well_tuned_connectx_host_passes_everything() {
    let f = run("tuned", &tuned_inputs());
    let want: &[(&str, Verdict)] = &[
        ("rdma.device", Pass),
        ("rdma.port", Pass),
        ("rdma.gid", Pass),
        ("rdma.mtu", Pass),
        ("rdma.speed", Pass),
        ("lossless.pfc", Pass),
        ("lossless.trust", Pass),
        ("lossless.dscp", Pass),
        ("lossless.traffic_class", Pass),
        ("lossless.ecn", Pass),
        ("host.cores", Pass),
        ("host.isolcpus", Pass),
        ("host.nohz_full", Pass),
        ("host.rcu_nocbs", Pass),
        ("host.governor", Pass),
        ("host.cstates", Pass),
        ("host.smt", Pass),
        ("host.thp", Pass),
        ("host.hugepages", Pass),
        ("host.swap", Pass),
        ("host.numa", Pass),
        ("host.irq", Pass),
        ("host.memlock", Pass),
        ("host.shm", Pass),
        ("host.clocksource", Pass),
        ("host.tsc", Pass),
        ("host.ptp", Pass),
    ];
    assert_eq!(table(&f), want);
    assert_eq!(found(&f, "rdma.device"), "mlx5_0 on ens1f0np0 (devices: mlx5_0)");
    assert_eq!(
        found(&f, "rdma.gid"),
        "1: fe80::ac0:ebff:fe4a:1b2c RoCE v2 on ens1f0np0; 3: 10.10.0.11 RoCE v2 on ens1f0np0; 2 other in use"
    );
    assert_eq!(found(&f, "rdma.mtu"), "active_mtu 4096, netdev ens1f0np0 MTU 9000");
    assert_eq!(found(&f, "lossless.pfc"), "PFC on priority 3");
    assert_eq!(found(&f, "lossless.traffic_class"), "traffic_class 104 = DSCP 26 ECN 0; rdma_cm default_roce_tos 104");
    assert_eq!(found(&f, "host.cstates"), "deepest enabled C1 (2 us)");
    assert_eq!(found(&f, "host.irq"), "6 IRQs on 0-1");
    assert_eq!(found(&f, "host.ptp"), "ptp0 (mlx5_ptp); gmPresent true, master_offset -12 ns");
    assert_eq!(exit_code(&f), 0);
}

#[test]
fn a_badly_tuned_connectx_host_fails_and_warns_where_it_should() {
    let f = run("untuned", &untuned_inputs());
    let want: &[(&str, Verdict)] = &[
        ("rdma.device", Pass),
        ("rdma.port", Fail),
        ("rdma.gid", Warn),
        ("rdma.mtu", Warn),
        ("rdma.speed", Warn),
        ("lossless.pfc", Fail),
        ("lossless.trust", Warn),
        ("lossless.dscp", Fail),
        ("lossless.traffic_class", Warn),
        ("lossless.ecn", Warn),
        ("host.cores", Fail),
        ("host.isolcpus", Warn),
        ("host.nohz_full", Warn),
        ("host.rcu_nocbs", Warn),
        ("host.governor", Warn),
        ("host.cstates", Warn),
        ("host.smt", Warn),
        ("host.thp", Warn),
        ("host.hugepages", Warn),
        ("host.swap", Warn),
        ("host.numa", Warn),
        ("host.irq", Warn),
        ("host.memlock", Fail),
        ("host.shm", Fail),
        ("host.clocksource", Warn),
        ("host.tsc", Warn),
        ("host.ptp", Warn),
    ];
    assert_eq!(table(&f), want);
    assert_eq!(found(&f, "rdma.port"), "DOWN, Disabled, Ethernet");
    assert_eq!(found(&f, "lossless.pfc"), "PFC off on every priority");
    assert_eq!(found(&f, "lossless.dscp"), "no dscp-prio entry for 0 (mlx5 default 0/8 = priority 0)");
    assert_eq!(found(&f, "host.cores"), "online 0-15; allowed 0-3; hot 4-5 not usable");
    assert_eq!(found(&f, "host.cstates"), "enabled: C6 (133 us)");
    assert_eq!(found(&f, "host.smt"), "4: sibling 12 online; 5: sibling 13 online");
    assert_eq!(found(&f, "host.numa"), "enp65s0f0np0 on node1 (cpus 8-15); hot 4-5 elsewhere");
    assert_eq!(found(&f, "host.memlock"), "65536 bytes (64 KiB)");
    assert_eq!(found(&f, "host.shm"), "32 MiB free of 64 MiB");
    assert_eq!(exit_code(&f), 1);
    let smt = f.iter().find(|x| x.id == "host.smt").unwrap();
    assert!(smt
        .fix
        .starts_with("echo 0 > /sys/devices/system/cpu/cpu12/online; echo 0 > /sys/devices/system/cpu/cpu13/online"));
}

#[test]
fn the_same_untuned_host_with_dscp_26_only_leans_on_the_nic_default_map() {
    let inputs = Inputs { traffic_class: 104, ..untuned_inputs() };
    let f = run("untuned", &inputs);
    let dscp = f.iter().find(|x| x.id == "lossless.dscp").unwrap();
    assert_eq!(
        (dscp.verdict, dscp.found.as_str()),
        (Warn, "no dscp-prio entry for 26 (mlx5 default 26/8 = priority 3)")
    );
    let tc = f.iter().find(|x| x.id == "lossless.traffic_class").unwrap();
    assert_eq!(tc.verdict, Pass);
}

#[test]
fn a_vm_without_rdma_reports_unknown_rather_than_guessing() {
    let f = run("vm", &vm_inputs());
    let want: &[(&str, Verdict)] = &[
        ("rdma.device", Warn),
        ("rdma.port", Unknown),
        ("rdma.gid", Unknown),
        ("rdma.mtu", Unknown),
        ("rdma.speed", Unknown),
        ("lossless.pfc", Unknown),
        ("lossless.trust", Unknown),
        ("lossless.dscp", Unknown),
        ("lossless.traffic_class", Unknown),
        ("lossless.ecn", Unknown),
        ("host.cores", Unknown),
        ("host.isolcpus", Unknown),
        ("host.nohz_full", Unknown),
        ("host.rcu_nocbs", Unknown),
        ("host.governor", Unknown),
        ("host.cstates", Unknown),
        ("host.smt", Pass),
        ("host.thp", Pass),
        ("host.hugepages", Warn),
        ("host.swap", Warn),
        ("host.numa", Unknown),
        ("host.irq", Unknown),
        ("host.memlock", Warn),
        ("host.shm", Pass),
        ("host.clocksource", Warn),
        ("host.tsc", Pass),
        ("host.ptp", Unknown),
    ];
    assert_eq!(table(&f), want);
    assert_eq!(found(&f, "host.numa"), "enp1s0 on node0 (cpus 0-3); no --hot-cores given");
    assert_eq!(found(&f, "host.irq"), "enp1s0: no MSI IRQs listed");
    assert_eq!(found(&f, "host.clocksource"), "kvm-clock (available: kvm-clock tsc acpi_pm)");
    assert_eq!(found(&f, "host.ptp"), "ptp0 (KVM virtual PTP), not the NIC's; ptp4l not answering");
    assert_eq!(exit_code(&f), 0);
}

#[test]
fn preflight_is_the_fail_or_lie_subset() {
    let ids = |f: &[Finding]| f.iter().map(|x| (x.id.clone(), x.verdict)).collect::<Vec<_>>();
    let s = |id: &str, v| (id.to_owned(), v);
    let tuned = preflight(&Rooted::new(root("tuned")), &Inputs { need_rdma: true, ..tuned_inputs() });
    assert_eq!(
        ids(&tuned),
        [s("host.memlock", Pass), s("host.shm", Pass), s("host.cores", Pass), s("rdma.device", Pass)]
    );
    let untuned = preflight(&Rooted::new(root("untuned")), &untuned_inputs());
    assert_eq!(ids(&untuned), [s("host.memlock", Fail), s("host.shm", Fail), s("host.cores", Fail)]);
    // A VM asked to run verbs: no device is now a failure, and a named device that is absent too.
    let vm = preflight(&Rooted::new(root("vm")), &Inputs { need_rdma: true, hot_cores: vec![1], ..vm_inputs() });
    assert_eq!(ids(&vm), [s("host.memlock", Warn), s("host.shm", Pass), s("host.cores", Pass), s("rdma.device", Fail)]);
    let named = all(&Rooted::new(root("tuned")), &Inputs { device: Some("mlx5_1".to_owned()), ..tuned_inputs() });
    assert_eq!((named[0].verdict, named[0].found.as_str()), (Fail, "no mlx5_1 (devices: mlx5_0)"));
}

fn doctor(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mdfan-doctor")).args(args).output().expect("runs");
    (out.status.code().expect("exited"), String::from_utf8(out.stdout).expect("utf-8"))
}

#[test]
fn the_binary_prints_the_table_and_exits_by_the_worst_verdict() {
    let untuned = root("untuned");
    let args = ["--root", untuned.to_str().unwrap(), "--hot-cores", "4-5", "--ring-bytes", "67108864"];
    let (code, text) = doctor(&args);
    assert_eq!(code, 1);
    let row = text.lines().find(|l| l.starts_with("host.memlock")).unwrap();
    assert_eq!(row.split_whitespace().take(2).collect::<Vec<_>>(), ["host.memlock", "fail"]);
    assert!(text.contains("host.memlock (fail): 65536 bytes (64 KiB)\n  why: ibv_reg_mr pins"), "{text}");
    assert!(text.contains("  fix: dcb pfc set dev enp65s0f0np0 prio-pfc all:off 3:on"), "{text}");
    assert!(text.ends_with("\n1 pass, 20 warn, 6 fail, 0 unknown\n"), "{text}");

    let tuned = root("tuned");
    let (code, text) = doctor(&["--root", tuned.to_str().unwrap(), "--hot-cores", "2,3", "--traffic-class", "104"]);
    assert_eq!(code, 0);
    assert!(text.ends_with("\n27 pass, 0 warn, 0 fail, 0 unknown\n"), "{text}");

    let (code, _) = doctor(&["--hot-cores", "two"]);
    assert_eq!(code, 2);
}

#[test]
fn json_round_trips() {
    for (name, inputs, args) in [
        ("tuned", tuned_inputs(), vec!["--hot-cores", "2,3", "--ring-bytes", "67108864", "--traffic-class", "104"]),
        ("untuned", untuned_inputs(), vec!["--hot-cores", "4,5", "--ring-bytes", "67108864"]),
        ("vm", vm_inputs(), vec!["--netdev", "enp1s0"]),
    ] {
        let dir = root(name);
        let mut all_args = vec!["--root", dir.to_str().unwrap(), "--json"];
        all_args.extend(args);
        let (_, text) = doctor(&all_args);
        let parsed: Vec<Finding> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        assert_eq!(parsed, run(name, &inputs), "{name}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = value[0].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["area", "fix", "found", "id", "verdict", "wanted", "why"], "{name}");
        assert_eq!(value[0]["verdict"], if name == "vm" { "warn" } else { "pass" });
    }
}

/// A poller pinned to core 0 is told to move, not to isolate the boot CPU (the kernel drops CPU 0 from nohz_full
/// and keeps its housekeeping there); the other hot cores keep their boot parameters.
#[test]
fn core_0_is_never_advised_into_isolation() {
    let f = run("untuned", &Inputs { hot_cores: vec![0, 5], ..untuned_inputs() });
    let fix = |id: &str| f.iter().find(|x| x.id == id).map(|x| x.fix.clone()).unwrap();
    assert!(fix("host.nohz_full").starts_with("boot with nohz_full=5; move the poller off core 0: it is the boot CPU"));
    assert!(
        fix("host.rcu_nocbs").starts_with("boot with rcu_nocbs=5 (implied by nohz_full); move the poller off core 0")
    );
    assert!(fix("host.isolcpus").starts_with("boot with isolcpus=5 (or a cpuset"), "{}", fix("host.isolcpus"));
    let only0 = run("untuned", &Inputs { hot_cores: vec![0], ..untuned_inputs() });
    let fix0 = only0.iter().find(|x| x.id == "host.nohz_full").map(|x| x.fix.clone()).unwrap();
    assert!(fix0.starts_with("move the poller off core 0"), "{fix0}");
    // and what is wanted never asks for core 0 isolated (a new user read "wanted 0 isolated" beside "move off 0")
    let wanted = |f: &[Finding], id: &str| f.iter().find(|x| x.id == id).map(|x| x.wanted.clone()).unwrap();
    assert_eq!(wanted(&only0, "host.isolcpus"), "no poller on core 0 (the boot CPU); its core isolated (isolcpus)");
    assert_eq!(wanted(&f, "host.nohz_full"), "5 in nohz_full, and no poller on core 0 (the boot CPU)");
}

#[test]
fn hardware_timestamping_on_the_line_interfaces() {
    let with = |name: &str, ifname: &str| {
        let inputs = Inputs { line_interfaces: vec![ifname.to_owned()], ..Inputs::default() };
        let f = run(name, &inputs);
        f.into_iter().filter(|f| f.id.starts_with("lines.")).collect::<Vec<_>>()
    };
    // A ConnectX with its PHC in TAI, stamping on, phc2sys running.
    let f = with("tuned", "ens1f0np0");
    assert_eq!(
        table(&f),
        [
            ("lines.hw_timestamping.ens1f0np0", Pass),
            ("lines.hw_rx.ens1f0np0", Pass),
            ("lines.phc_sync.ens1f0np0", Pass)
        ]
    );
    assert_eq!(
        found(&f, "lines.hw_timestamping.ens1f0np0"),
        "ens1f0np0: hardware receive stamps, PHC /dev/ptp0, receive filters none,all"
    );
    assert_eq!(
        found(&f, "lines.phc_sync.ens1f0np0"),
        "/dev/ptp0: phc2sys running, PHC - CLOCK_REALTIME 37000000212 ns"
    );
    // The same NIC with stamping off and the PHC left free-running.
    let f = with("untuned", "enp65s0f0np0");
    assert_eq!(table(&f)[1..], [("lines.hw_rx.enp65s0f0np0", Warn), ("lines.phc_sync.enp65s0f0np0", Warn)]);
    assert_eq!(found(&f, "lines.hw_rx.enp65s0f0np0"), "enp65s0f0np0: rx_filter 0");
    assert!(f[1].fix.contains("hwstamp_ctl -i enp65s0f0np0 -r 1"), "{}", f[1].fix);
    assert_eq!(
        found(&f, "lines.phc_sync.enp65s0f0np0"),
        "/dev/ptp0: phc2sys not running, PHC - CLOCK_REALTIME -1734022915 ns"
    );
    // A NIC without a PHC, and a VM's virtio-net: software stamps only.
    for (name, ifname) in [("nophc", "eno1"), ("vm", "enp1s0")] {
        let f = with(name, ifname);
        assert_eq!(
            table(&f),
            [
                (format!("lines.hw_timestamping.{ifname}").as_str(), Warn),
                (format!("lines.hw_rx.{ifname}").as_str(), Unknown),
                (format!("lines.phc_sync.{ifname}").as_str(), Unknown)
            ],
            "{name}"
        );
        assert_eq!(
            found(&f, &format!("lines.hw_timestamping.{ifname}")),
            format!("{ifname}: software stamps only, no PHC, receive filters none listed")
        );
    }
    // No line interface named: no such finding.
    assert!(!run("tuned", &tuned_inputs()).iter().any(|f| f.id.starts_with("lines.")));
}
