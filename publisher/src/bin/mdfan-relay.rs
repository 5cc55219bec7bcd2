//! `mdfan-relay --config FILE`: one relay per host. It subscribes once to an upstream mdfan publisher (or to a
//! hot-hot pair of them: `connect = [A, B]`) and serves the host's strategies over shared memory as a publisher
//! does: the same control protocol, access control, snapshots from its own books, counters file, preflight and
//! doctor findings. Its config is a publisher's with `[feed] format = "mdfan"` (ops/relay.toml;
//! `mdfan_publisher::feeds::relay` says what passes and what the relay adds on an upstream gap, silence or loss).
//!
//! Exit status, signals and output as `mdfan-publisher`'s; its report has a `feed format=mdfan upstream=..`
//! line. A config whose feed is another format is refused (exit 1).

mod serve;

fn main() {
    serve::main_as("mdfan-relay")
}
