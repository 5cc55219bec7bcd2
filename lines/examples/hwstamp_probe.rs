//! `hwstamp_probe ADDR:PORT [COUNT] [--send TO:PORT]`: opens one line on ADDR:PORT with
//! `lines.hw_timestamps = "required"` (the device holding ADDR must stamp every packet in hardware and have a
//! PHC, else it says why and exits 1), prints what the device granted and the PHC mapping, then receives COUNT
//! datagrams (default 10) and prints each one's stamp kind and `CLOCK_REALTIME` - stamp. With `--send`, it
//! instead sends COUNT datagrams to TO:PORT (for the other end of a test link). The first host's proof of
//! hardware stamps (docs/RUNBOOK.md, section 3a) and the VM probe (ops/softroce) use it.

use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use mdfan_lines::{realtime_ns, HwTimestamps, LineConfig, LineSocket};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: hwstamp_probe ADDR:PORT [COUNT] [--send TO:PORT]");
        std::process::exit(2)
    };
    let Some(addr) = args.first().and_then(|a| a.parse::<SocketAddrV4>().ok()) else { usage() };
    let count: u64 = args.get(1).and_then(|c| c.parse().ok()).unwrap_or(10);
    if let Some(to) = args.iter().position(|a| a == "--send").and_then(|i| args.get(i + 1)) {
        let to: SocketAddrV4 = to.parse().unwrap_or_else(|_| usage());
        let sock = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        for i in 0..count {
            sock.send_to(&i.to_be_bytes(), to).unwrap_or_else(|e| panic!("send to {to}: {e}"));
            std::thread::sleep(Duration::from_millis(20));
        }
        println!("sent {count} datagrams to {to}");
        return;
    }
    let cfg = LineConfig { hw_timestamps: HwTimestamps::Required, ..LineConfig::new(addr) };
    let mut line = match LineSocket::open(&cfg) {
        Ok(l) => l,
        Err(e) => {
            println!("refused: {e}");
            std::process::exit(1);
        }
    };
    println!("{}", line.hw_state().line());
    if let Some(m) = line.phc_map() {
        println!("{}", m.line());
    }
    let mut buf = [0u8; 2048];
    let (mut got, deadline) = (0u64, Instant::now() + Duration::from_secs(30));
    while got < count && Instant::now() < deadline {
        match line.recv(&mut buf) {
            Ok(Some(r)) => {
                got += 1;
                let age = realtime_ns() as i128 - r.ts_recv_ns as i128;
                println!("datagram {got} len={} stamp={} realtime_minus_stamp_ns={age}", r.len, r.stamp.name());
            }
            Ok(None) => std::thread::sleep(Duration::from_micros(200)),
            Err(e) => panic!("{e}"),
        }
    }
    println!("received {got} of {count}");
}
