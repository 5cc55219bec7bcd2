//! The host: cores (isolation, power management, SMT), memory (THP, hugepages, swap, memlock, /dev/shm), the NIC's
//! NUMA node and IRQs against the hot cores, clocks (clocksource, invariant TSC, PTP). Files as documented in
//! Documentation/ABI (sysfs-devices-system-cpu, sysfs-kernel-mm-transparent-hugepage), proc(5) and
//! Documentation/admin-guide/kernel-parameters.rst.

use super::{finding, Target};
use crate::cpulist::{format as cpus, parse as parse_cpus};
use crate::{Area, Finding, Inputs, Source, Verdict};

const AREA: Area = Area::Host;
const CPU: &str = "/sys/devices/system/cpu";

fn online(src: &dyn Source) -> Vec<usize> {
    src.read(&format!("{CPU}/online")).as_deref().and_then(parse_cpus).unwrap_or_default()
}

/// The hot cores, or every online CPU when none were given (for checks that judge all cores).
fn targets(src: &dyn Source, inputs: &Inputs) -> Vec<usize> {
    if inputs.hot_cores.is_empty() {
        online(src)
    } else {
        inputs.hot_cores.clone()
    }
}

/// A boot parameter's value from /proc/cmdline (`isolcpus=2-3` -> `2-3`); the last one wins, as in the kernel.
fn cmdline_param(src: &dyn Source, key: &str) -> Option<String> {
    let line = src.read("/proc/cmdline")?;
    line.split_whitespace().filter_map(|w| w.strip_prefix(key)?.strip_prefix('=')).next_back().map(str::to_owned)
}

fn cmdline_has(src: &dyn Source, word: &str) -> bool {
    src.read("/proc/cmdline").is_some_and(|l| l.split_whitespace().any(|w| w == word))
}

pub(super) fn cores(src: &dyn Source, inputs: &Inputs) -> Finding {
    const ID: &str = "host.cores";
    const WANTED: &str = "every hot core online and in this process's allowed CPUs";
    const WHY: &str = "a hot loop pinned to a core it may not use fails to pin (or runs unpinned and migrates), \
                       and a cgroup cpuset or taskset that excludes the hot cores silently moves the loop";
    let online = online(src);
    let allowed = src
        .read("/proc/self/status")
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(str::to_owned)))
        .as_deref()
        .and_then(parse_cpus);
    let mut found = format!("online {}", cpus(&online));
    if let Some(a) = &allowed {
        found.push_str(&format!("; allowed {}", cpus(a)));
    }
    let fix = "pick hot cores from the allowed list, or widen the cpuset (systemd AllowedCPUs=, taskset, docker \
               --cpuset-cpus)";
    if inputs.hot_cores.is_empty() {
        return finding(ID, AREA, Verdict::Unknown, found + "; no --hot-cores given", WANTED, WHY, fix);
    }
    let bad: Vec<usize> = inputs
        .hot_cores
        .iter()
        .copied()
        .filter(|c| !online.contains(c) || allowed.as_ref().is_some_and(|a| !a.contains(c)))
        .collect();
    let verdict = if bad.is_empty() { Verdict::Pass } else { Verdict::Fail };
    if !bad.is_empty() {
        found.push_str(&format!("; hot {} not usable", cpus(&bad)));
    }
    finding(ID, AREA, verdict, found, WANTED, WHY, fix)
}

/// What the isolation findings advise for a poller on core 0.
const CORE0_FIX: &str = "move the poller off core 0: it is the boot CPU, where the kernel keeps its timekeeping and \
                         housekeeping (nohz_full never takes it)";

/// isolcpus, nohz_full and rcu_nocbs against the hot cores.
pub(super) fn isolation(src: &dyn Source, inputs: &Inputs) -> Vec<Finding> {
    let hot = &inputs.hot_cores;
    // Core 0 is the boot CPU: the kernel keeps timekeeping and housekeeping there and drops it from nohz_full,
    // so a poller on it is moved rather than core 0 isolated (and the wanted state says so too).
    let others: Vec<usize> = hot.iter().copied().filter(|&c| c != 0).collect();
    let judge = |id: &str, what: &str, set: Vec<usize>, extra: String, why: &str, fix: String| {
        let wanted = match (hot.is_empty(), hot.contains(&0), others.is_empty()) {
            (true, ..) => format!("the hot cores {what}"),
            (false, false, _) => format!("{} {what}", cpus(hot)),
            (false, true, true) => format!("no poller on core 0 (the boot CPU); its core {what}"),
            (false, true, false) => format!("{} {what}, and no poller on core 0 (the boot CPU)", cpus(&others)),
        };
        let found = format!("{}{extra}", cpus(&set));
        let verdict = if hot.is_empty() {
            Verdict::Unknown
        } else if hot.iter().all(|c| set.contains(c)) {
            Verdict::Pass
        } else {
            Verdict::Warn
        };
        finding(id, AREA, verdict, found, wanted, why, fix)
    };
    let hot_list = if hot.is_empty() { "HOT".to_owned() } else { cpus(&others) };
    let boot_fix = |fix: String| match (hot.contains(&0), others.is_empty()) {
        (false, _) => fix,
        (true, true) => CORE0_FIX.to_owned(),
        (true, false) => format!("{fix}; {CORE0_FIX}"),
    };
    let isolated = src.read(&format!("{CPU}/isolated")).as_deref().and_then(parse_cpus).unwrap_or_default();
    // nohz_full reads "(null)" when unset.
    let nohz = src.read(&format!("{CPU}/nohz_full")).as_deref().and_then(parse_cpus).unwrap_or_default();
    let rcu_param = cmdline_param(src, "rcu_nocbs").as_deref().and_then(parse_cpus).unwrap_or_default();
    // nohz_full= implies rcu_nocbs= for the same CPUs.
    let from_nohz = rcu_param.is_empty() && !nohz.is_empty();
    let mut rcu = rcu_param;
    rcu.extend(&nohz);
    rcu.sort_unstable();
    rcu.dedup();
    vec![
        judge(
            "host.isolcpus",
            "isolated (isolcpus)",
            isolated,
            String::new(),
            "the scheduler's load balancing puts other threads on a core that is not isolated; each \
             preemption of a busy-polling loop is a latency spike of the length of the other thread's slice",
            boot_fix(format!(
                "boot with isolcpus={hot_list} (or a cpuset partition: cset / systemd AllowedCPUs= for the rest)"
            )),
        ),
        judge(
            "host.nohz_full",
            "in nohz_full",
            nohz,
            String::new(),
            "without nohz_full the scheduler tick interrupts the polling core (250-1000 times a second), \
             a few microseconds each",
            boot_fix(format!("boot with nohz_full={hot_list}")),
        ),
        judge(
            "host.rcu_nocbs",
            "in rcu_nocbs",
            rcu,
            if from_nohz { " (from nohz_full)".to_owned() } else { String::new() },
            "RCU callbacks run as softirq work on the core that queued them unless offloaded to rcuo threads \
             on housekeeping cores",
            boot_fix(format!("boot with rcu_nocbs={hot_list} (implied by nohz_full)")),
        ),
    ]
}

pub(super) fn governor(src: &dyn Source, inputs: &Inputs) -> Finding {
    const ID: &str = "host.governor";
    const WHY: &str = "a scaling governor lowers the clock of a core it sees idle; a core woken by a burst runs its \
                       first microseconds slow, and frequency transitions stall the core";
    let cores = targets(src, inputs);
    let wanted = format!("performance on {}", cpus(&cores));
    let mut by: Vec<(String, Vec<usize>)> = Vec::new();
    for c in &cores {
        let Some(g) = src.read_trim(&format!("{CPU}/cpu{c}/cpufreq/scaling_governor")) else { continue };
        match by.iter_mut().find(|(name, _)| *name == g) {
            Some((_, v)) => v.push(*c),
            None => by.push((g, vec![*c])),
        }
    }
    let fix = format!("cpupower -c {} frequency-set -g performance", cpus(&cores));
    if by.is_empty() {
        let found = "no cpufreq (a VM, or firmware owns the clock)";
        return finding(ID, AREA, Verdict::Unknown, found, wanted, WHY, fix);
    }
    let found: Vec<String> = by.iter().map(|(g, v)| format!("{g} on {}", cpus(v))).collect();
    let verdict = if by.iter().all(|(g, _)| g == "performance") { Verdict::Pass } else { Verdict::Warn };
    finding(ID, AREA, verdict, found.join("; "), wanted, WHY, fix)
}

/// Exit latency above which a C-state counts as deep, in microseconds.
const DEEP_US: u64 = 10;

pub(super) fn cstates(src: &dyn Source, inputs: &Inputs) -> Finding {
    const ID: &str = "host.cstates";
    const WHY: &str = "a core waking from a deep C-state (C6: ~100 us exit latency) delays the first record of a \
                       burst; a busy-polling core never sleeps, but the spin-then-yield idler, the conductor and \
                       the SMT sibling do";
    let cores = targets(src, inputs);
    let wanted = format!("no enabled C-state with exit latency > {DEEP_US} us on {}", cpus(&cores));
    let fix = format!(
        "cpupower -c {} idle-set -D {DEEP_US}, or boot with intel_idle.max_cstate=1 processor.max_cstate=1",
        cpus(&cores)
    );
    if cmdline_has(src, "idle=poll") {
        return finding(ID, AREA, Verdict::Pass, "idle=poll", wanted, WHY, fix);
    }
    let mut deep: Vec<(String, u64)> = Vec::new();
    let mut shallow_max: Option<(String, u64)> = None;
    let mut seen = false;
    for c in &cores {
        let base = format!("{CPU}/cpu{c}/cpuidle");
        for state in src.list(&base).unwrap_or_default() {
            let s = format!("{base}/{state}");
            let (Some(name), Some(lat)) = (src.read_trim(&format!("{s}/name")), src.read_trim(&format!("{s}/latency")))
            else {
                continue;
            };
            seen = true;
            let lat: u64 = lat.parse().unwrap_or(0);
            if src.read_trim(&format!("{s}/disable")).as_deref() == Some("1") {
                continue;
            }
            if lat > DEEP_US {
                if !deep.iter().any(|(n, _)| *n == name) {
                    deep.push((name, lat));
                }
            } else if shallow_max.as_ref().is_none_or(|(_, l)| lat > *l) {
                shallow_max = Some((name, lat));
            }
        }
    }
    if !seen {
        return finding(ID, AREA, Verdict::Unknown, "no cpuidle states exposed", wanted, WHY, fix);
    }
    if deep.is_empty() {
        let found = shallow_max.map_or("no state enabled".to_owned(), |(n, l)| format!("deepest enabled {n} ({l} us)"));
        return finding(ID, AREA, Verdict::Pass, found, wanted, WHY, fix);
    }
    let list: Vec<String> = deep.iter().map(|(n, l)| format!("{n} ({l} us)")).collect();
    finding(ID, AREA, Verdict::Warn, format!("enabled: {}", list.join(", ")), wanted, WHY, fix)
}

pub(super) fn smt(src: &dyn Source, inputs: &Inputs) -> Finding {
    const ID: &str = "host.smt";
    const WHY: &str = "an SMT sibling shares the core's pipeline, L1 and L2: whatever runs on it slows the hot loop \
                       by tens of percent, unpredictably";
    let control = src.read_trim(&format!("{CPU}/smt/control")).unwrap_or_else(|| "unknown".to_owned());
    let hot = &inputs.hot_cores;
    let wanted = "no online SMT sibling of a hot core".to_owned();
    if hot.is_empty() {
        let found = format!("SMT control {control}; no --hot-cores given");
        let verdict = if matches!(control.as_str(), "off" | "forceoff" | "notsupported") {
            Verdict::Pass
        } else {
            Verdict::Unknown
        };
        return finding(ID, AREA, verdict, found, wanted, WHY, "echo off > /sys/devices/system/cpu/smt/control");
    }
    let online = online(src);
    let mut busy: Vec<String> = Vec::new();
    let mut to_offline: Vec<usize> = Vec::new();
    for c in hot {
        let sibs = src
            .read(&format!("{CPU}/cpu{c}/topology/thread_siblings_list"))
            .as_deref()
            .and_then(parse_cpus)
            .unwrap_or_default();
        let on: Vec<usize> = sibs.into_iter().filter(|s| s != c && online.contains(s)).collect();
        if !on.is_empty() {
            busy.push(format!("{c}: sibling {} online", cpus(&on)));
            to_offline.extend(on);
        }
    }
    let fix = if to_offline.is_empty() {
        String::new()
    } else {
        let cmds: Vec<String> =
            to_offline.iter().map(|s| format!("echo 0 > /sys/devices/system/cpu/cpu{s}/online")).collect();
        format!("{} (or nosmt on the kernel command line)", cmds.join("; "))
    };
    if busy.is_empty() {
        let found = format!("SMT control {control}; no hot core has an online sibling");
        return finding(ID, AREA, Verdict::Pass, found, wanted, WHY, fix);
    }
    finding(ID, AREA, Verdict::Warn, busy.join("; "), wanted, WHY, fix)
}

pub(super) fn thp(src: &dyn Source) -> Finding {
    const ID: &str = "host.thp";
    const WANTED: &str = "never or madvise";
    const WHY: &str = "THP 'always' lets khugepaged and page-fault compaction collapse and migrate pages of any \
                       process, stalling it for up to milliseconds";
    let fix = "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (or transparent_hugepage=madvise at boot)";
    let Some(text) = src.read_trim("/sys/kernel/mm/transparent_hugepage/enabled") else {
        return finding(ID, AREA, Verdict::Unknown, "no THP in this kernel", WANTED, WHY, fix);
    };
    // "always [madvise] never": the bracketed word is the mode.
    let mode = text.split_whitespace().find_map(|w| w.strip_prefix('[')?.strip_suffix(']')).unwrap_or(&text);
    let verdict = if mode == "always" { Verdict::Warn } else { Verdict::Pass };
    finding(ID, AREA, verdict, mode.to_owned(), WANTED, WHY, fix)
}

/// A `/proc/meminfo` value (`HugePages_Free:      512`, `Hugepagesize:       2048 kB`).
fn meminfo(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
}

/// Bytes in MiB, or KiB below one MiB (a 64 KiB memlock limit must not read "0 MiB").
fn mib(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{} MiB", bytes / (1 << 20))
    }
}

pub(super) fn hugepages(src: &dyn Source, inputs: &Inputs) -> Finding {
    const ID: &str = "host.hugepages";
    const WHY: &str = "memory on 4 KiB pages costs a TLB miss per 4 KiB touched; mdfan-tuning's HugeBuffer takes 2 \
                       MiB pages when some are reserved and falls back to 4 KiB pages otherwise";
    let need = inputs.ring_bytes.unwrap_or(1);
    let wanted = match inputs.ring_bytes {
        Some(b) => format!("free hugepages >= {}", mib(b)),
        None => "some free hugepages".to_owned(),
    };
    let pages = need.div_ceil(2 << 20).max(1);
    let fix = format!("echo {pages} > /proc/sys/vm/nr_hugepages (or hugepages={pages} at boot)");
    let Some(text) = src.read("/proc/meminfo") else {
        return finding(ID, AREA, Verdict::Unknown, "no /proc/meminfo", wanted, WHY, fix);
    };
    let (total, free, size_kb) =
        (meminfo(&text, "HugePages_Total"), meminfo(&text, "HugePages_Free"), meminfo(&text, "Hugepagesize"));
    let (Some(total), Some(free), Some(size_kb)) = (total, free, size_kb) else {
        return finding(ID, AREA, Verdict::Unknown, "no hugepage lines in /proc/meminfo", wanted, WHY, fix);
    };
    let free_bytes = free * size_kb * 1024;
    let found = format!("{free} of {total} free, {size_kb} kB each ({})", mib(free_bytes));
    let verdict = if free_bytes >= need { Verdict::Pass } else { Verdict::Warn };
    finding(ID, AREA, verdict, found, wanted, WHY, fix)
}

pub(super) fn swap(src: &dyn Source) -> Finding {
    const ID: &str = "host.swap";
    const WANTED: &str = "no swap";
    const WHY: &str = "mdfan locks its own memory, but a page of a neighbour, a library or the kernel's page cache \
                       swapped out and faulted back in on a shared path costs milliseconds";
    let Some(text) = src.read("/proc/swaps") else {
        return finding(ID, AREA, Verdict::Unknown, "no /proc/swaps", WANTED, WHY, "swapoff -a");
    };
    let devices: Vec<&str> = text.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    if devices.is_empty() {
        return finding(ID, AREA, Verdict::Pass, "none", WANTED, WHY, "swapoff -a");
    }
    let fix = "swapoff -a (and remove it from /etc/fstab)";
    finding(ID, AREA, Verdict::Warn, devices.join(", "), WANTED, WHY, fix)
}

pub(super) fn numa(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "host.numa";
    const WANTED: &str = "the hot cores on the NIC's NUMA node";
    const WHY: &str = "a hot core on the other socket reaches the NIC's doorbells, CQs and DMA'd rings across the \
                       socket interconnect: hundreds of nanoseconds on every record";
    let Some(netdev) = &t.netdev else {
        return finding(ID, AREA, Verdict::Unknown, "no netdev", WANTED, WHY, "");
    };
    let nodes: Vec<String> = src
        .list("/sys/devices/system/node")
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.strip_prefix("node").is_some_and(|d| d.parse::<u32>().is_ok()))
        .collect();
    let nic = src.read_trim(&format!("/sys/class/net/{netdev}/device/numa_node"));
    let node = match nic.as_deref().map(str::parse::<i32>) {
        Some(Ok(n)) if n >= 0 => format!("node{n}"),
        // -1: the platform reports no affinity, which on one node means node0.
        Some(Ok(_)) if nodes.len() <= 1 => "node0".to_owned(),
        _ => {
            let found = format!("{netdev}: no NUMA node reported ({} nodes)", nodes.len().max(1));
            return finding(ID, AREA, Verdict::Unknown, found, WANTED, WHY, "");
        }
    };
    let node_cpus = src.read(&format!("/sys/devices/system/node/{node}/cpulist")).as_deref().and_then(parse_cpus);
    let mut found = format!("{netdev} on {node}");
    if let Some(c) = &node_cpus {
        found.push_str(&format!(" (cpus {})", cpus(c)));
    }
    let fix = match &node_cpus {
        Some(c) => format!("pick hot cores from {} (lscpu -e, lstopo)", cpus(c)),
        None => "pick hot cores on the NIC's node (lscpu -e, lstopo)".to_owned(),
    };
    if inputs.hot_cores.is_empty() {
        return finding(ID, AREA, Verdict::Unknown, found + "; no --hot-cores given", WANTED, WHY, fix);
    }
    let far: Vec<usize> = match &node_cpus {
        Some(c) => inputs.hot_cores.iter().copied().filter(|h| !c.contains(h)).collect(),
        None => return finding(ID, AREA, Verdict::Unknown, found, WANTED, WHY, fix),
    };
    if far.is_empty() {
        return finding(ID, AREA, Verdict::Pass, found, WANTED, WHY, fix);
    }
    found.push_str(&format!("; hot {} elsewhere", cpus(&far)));
    finding(ID, AREA, Verdict::Warn, found, WANTED, WHY, fix)
}

pub(super) fn irq(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "host.irq";
    const WANTED: &str = "no NIC queue IRQ allowed on a hot core";
    const WHY: &str = "mdfan polls its CQs and takes no interrupt, but the NIC's Ethernet and completion IRQs land \
                       wherever their affinity allows; one on a hot core stops the loop for the handler and its \
                       softirq";
    let Some(netdev) = &t.netdev else {
        return finding(ID, AREA, Verdict::Unknown, "no netdev", WANTED, WHY, "");
    };
    let irqs = src.list(&format!("/sys/class/net/{netdev}/device/msi_irqs")).unwrap_or_default();
    if irqs.is_empty() {
        let found = format!("{netdev}: no MSI IRQs listed");
        return finding(ID, AREA, Verdict::Unknown, found, WANTED, WHY, "");
    }
    let hot = &inputs.hot_cores;
    let hot_list = if hot.is_empty() { "HOT".to_owned() } else { cpus(hot) };
    let mut hit: Vec<String> = Vec::new();
    let mut all_cpus: Vec<usize> = Vec::new();
    let mut known = 0;
    for n in &irqs {
        let Some(aff) = src.read(&format!("/proc/irq/{n}/smp_affinity_list")).as_deref().and_then(parse_cpus) else {
            continue;
        };
        known += 1;
        if aff.iter().any(|c| hot.contains(c)) {
            hit.push(n.clone());
        }
        all_cpus.extend(aff);
    }
    let fix = format!(
        "stop irqbalance (or IRQBALANCE_BANNED_CPULIST={hot_list}); for i in {}; do echo HOUSEKEEPING > \
         /proc/irq/$i/smp_affinity_list; done",
        irqs.join(" ")
    );
    if known == 0 {
        let found = format!("{} IRQs, no affinity readable", irqs.len());
        return finding(ID, AREA, Verdict::Unknown, found, WANTED, WHY, fix);
    }
    let mut found = format!("{known} IRQs on {}", cpus(&all_cpus));
    if hot.is_empty() {
        return finding(ID, AREA, Verdict::Unknown, found + "; no --hot-cores given", WANTED, WHY, fix);
    }
    if hit.is_empty() {
        return finding(ID, AREA, Verdict::Pass, found, WANTED, WHY, fix);
    }
    found.push_str(&format!("; {} of them may run on {}", hit.len(), cpus(hot)));
    finding(ID, AREA, Verdict::Warn, found, WANTED, WHY, fix)
}

/// Whether the process holds CAP_IPC_LOCK (bit 14 of CapEff), under which RLIMIT_MEMLOCK is not enforced.
fn has_ipc_lock(src: &dyn Source) -> bool {
    src.read("/proc/self/status")
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_owned())))
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .is_some_and(|caps| caps & (1 << 14) != 0)
}

pub(super) fn memlock(src: &dyn Source, inputs: &Inputs) -> Finding {
    const ID: &str = "host.memlock";
    const WHY: &str = "ibv_reg_mr pins the ring against RLIMIT_MEMLOCK and fails past it (the verbs fabric cannot \
                       start); mdfan also mlockall()s, and past the limit its pages can be faulted in on the hot path";
    let wanted = match inputs.ring_bytes {
        Some(b) => format!("unlimited, or >= {} (the rings)", mib(b)),
        None => "unlimited".to_owned(),
    };
    let fix = "ulimit -l unlimited; persist in /etc/security/limits.conf (memlock) or LimitMEMLOCK=infinity";
    if has_ipc_lock(src) {
        let found = "CAP_IPC_LOCK held: the limit is not enforced";
        return finding(ID, AREA, Verdict::Pass, found, wanted, WHY, fix);
    }
    // "Max locked memory         8388608              8388608              bytes"
    let soft = src.read("/proc/self/limits").and_then(|s| {
        let line = s.lines().find(|l| l.starts_with("Max locked memory"))?;
        line.trim_start_matches("Max locked memory").split_whitespace().next().map(str::to_owned)
    });
    let Some(soft) = soft else {
        return finding(ID, AREA, Verdict::Unknown, "no /proc/self/limits", wanted, WHY, fix);
    };
    if soft == "unlimited" {
        return finding(ID, AREA, Verdict::Pass, soft, wanted, WHY, fix);
    }
    let Ok(bytes) = soft.parse::<u64>() else {
        return finding(ID, AREA, Verdict::Unknown, soft, wanted, WHY, fix);
    };
    let found = format!("{bytes} bytes ({})", mib(bytes));
    let verdict = match inputs.ring_bytes {
        Some(need) if bytes < need => Verdict::Fail,
        Some(_) => Verdict::Pass,
        None => Verdict::Warn,
    };
    finding(ID, AREA, verdict, found, wanted, WHY, fix)
}

pub(super) fn shm(src: &dyn Source, inputs: &Inputs) -> Finding {
    const ID: &str = "host.shm";
    const WHY: &str = "a shared-memory ring reserves its pages when created; one that does not fit fails at start, \
                       and a tmpfs filled by something else later fails the next subscriber";
    let dir = &inputs.shm_dir;
    let wanted = match inputs.ring_bytes {
        Some(b) => format!("{dir}: >= {} free", mib(b)),
        None => format!("{dir}: space for the rings"),
    };
    let fix = format!("mount -o remount,size=4G {dir} (docker: --shm-size), or remove stale ring files there");
    let Some(space) = src.space(dir) else {
        return finding(ID, AREA, Verdict::Unknown, format!("cannot statvfs {dir}"), wanted, WHY, fix);
    };
    let found = format!("{} free of {}", mib(space.avail_bytes), mib(space.total_bytes));
    let verdict = match inputs.ring_bytes {
        Some(need) if space.avail_bytes < need => Verdict::Fail,
        Some(_) => Verdict::Pass,
        None if space.avail_bytes == 0 => Verdict::Fail,
        None => Verdict::Pass,
    };
    finding(ID, AREA, verdict, found, wanted, WHY, fix)
}

pub(super) fn clocksource(src: &dyn Source) -> Finding {
    const ID: &str = "host.clocksource";
    const WANTED: &str = "tsc";
    const WHY: &str = "mdfan stamps records with clock_gettime; on tsc it is a vDSO read of ~20 ns, on hpet or \
                       acpi_pm a system call of a microsecond or more, and on kvm-clock the stamps of two hosts \
                       are not comparable";
    let base = "/sys/devices/system/clocksource/clocksource0";
    let fix =
        format!("echo tsc > {base}/current_clocksource (boot: clocksource=tsc tsc=reliable, only on an invariant TSC)");
    let Some(cur) = src.read_trim(&format!("{base}/current_clocksource")) else {
        return finding(ID, AREA, Verdict::Unknown, "no clocksource in sysfs", WANTED, WHY, fix);
    };
    let avail = src.read_trim(&format!("{base}/available_clocksource")).unwrap_or_default();
    let verdict = if cur == "tsc" { Verdict::Pass } else { Verdict::Warn };
    finding(ID, AREA, verdict, format!("{cur} (available: {avail})"), WANTED, WHY, fix)
}

pub(super) fn tsc(src: &dyn Source) -> Finding {
    const ID: &str = "host.tsc";
    const WANTED: &str = "invariant TSC: constant_tsc and nonstop_tsc";
    const WHY: &str = "latency figures come from the TSC (quanta); without an invariant TSC it changes rate with \
                       frequency or stops in deep C-states, and the kernel drops it as clocksource";
    let fix = "none in software: use hardware with an invariant TSC (or trust only clock_gettime figures here)";
    let flags = src.read("/proc/cpuinfo").and_then(|s| {
        s.lines().find(|l| l.starts_with("flags")).and_then(|l| l.split_once(':')).map(|(_, f)| f.to_owned())
    });
    let Some(flags) = flags else {
        return finding(ID, AREA, Verdict::Unknown, "no x86 flags in /proc/cpuinfo", WANTED, WHY, fix);
    };
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    let present: Vec<&str> = ["constant_tsc", "nonstop_tsc", "tsc_reliable"].into_iter().filter(|f| has(f)).collect();
    let verdict = if has("constant_tsc") && has("nonstop_tsc") { Verdict::Pass } else { Verdict::Warn };
    let found = if present.is_empty() { "none of constant_tsc, nonstop_tsc".to_owned() } else { present.join(" ") };
    finding(ID, AREA, verdict, found, WANTED, WHY, fix)
}

pub(super) fn ptp(src: &dyn Source, t: &Target) -> Finding {
    const ID: &str = "host.ptp";
    const WANTED: &str = "the NIC's PHC synchronised by ptp4l: grandmaster present, |offset| <= 1000 ns";
    const WHY: &str = "one-way latency across two hosts is only as good as the clocks behind both stamps; an \
                       unsynchronised PHC or system clock turns the figures into fiction";
    let fix = "ptp4l -i NETDEV -m (and phc2sys -s NETDEV -w for the system clock); pmc -u -b 0 'GET TIME_STATUS_NP'";
    let clocks = src.list("/sys/class/ptp").unwrap_or_default();
    if clocks.is_empty() {
        return finding(ID, AREA, Verdict::Unknown, "no PHC (/sys/class/ptp is empty)", WANTED, WHY, fix);
    }
    let nic_phc =
        t.netdev.as_ref().and_then(|n| src.list(&format!("/sys/class/net/{n}/device/ptp"))?.into_iter().next());
    let phc = nic_phc.clone().unwrap_or_else(|| clocks[0].clone());
    let name = src.read_trim(&format!("/sys/class/ptp/{phc}/clock_name")).unwrap_or_default();
    let mut found = format!("{phc} ({name})");
    if nic_phc.is_none() {
        found.push_str(", not the NIC's");
    }
    // ptp4l's management socket: asking pmc without it would only wait for a timeout.
    let ptp4l_running = src.list("/var/run").is_some_and(|v| v.iter().any(|n| n == "ptp4l"));
    let status = if ptp4l_running { src.command(&["pmc", "-u", "-b", "0", "GET TIME_STATUS_NP"]) } else { None };
    let Some(status) = status else {
        found.push_str("; ptp4l not answering");
        return finding(ID, AREA, Verdict::Unknown, found, WANTED, WHY, fix);
    };
    let field = |k: &str| {
        status.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(k)).then(|| w.next().map(str::to_owned)).flatten()
        })
    };
    let offset = field("master_offset").and_then(|o| o.parse::<i64>().ok());
    let gm = field("gmPresent");
    found.push_str(&format!(
        "; gmPresent {}, master_offset {} ns",
        gm.as_deref().unwrap_or("?"),
        offset.map_or("?".to_owned(), |o| o.to_string())
    ));
    let verdict = match (gm.as_deref(), offset) {
        (Some("true"), Some(o)) if o.abs() <= 1000 => Verdict::Pass,
        _ => Verdict::Warn,
    };
    finding(ID, AREA, verdict, found, WANTED, WHY, fix)
}
