//! The line receiver: lines A and B, a feed's [`SeqExtractor`] and the [`Arbiter`], with every buffer
//! allocated when it is built.

use crate::arbiter::{Arbiter, ArbiterConfig, ArbiterCounters, Datagram, Event, Line};
use crate::seq::SeqExtractor;
use crate::socket::{LineConfig, LineError, LineSocket, StampKind};

/// How to build a [`LineReceiver`].
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Line A.
    pub a: LineConfig,
    /// Line B.
    pub b: LineConfig,
    /// Arbitration window, tolerance and timeout.
    pub arbiter: ArbiterConfig,
    /// Receive buffer per datagram, bytes (64 KiB holds any UDP datagram). A longer datagram is counted as
    /// truncated and dropped.
    pub recv_buf_bytes: usize,
}

impl ReceiverConfig {
    /// Lines A and B with the default arbiter and a 64 KiB receive buffer.
    pub fn new(a: LineConfig, b: LineConfig) -> Self {
        Self { a, b, arbiter: ArbiterConfig::default(), recv_buf_bytes: 65_536 }
    }
}

/// What the receiver counted before arbitration, per line (A, B).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineCounters {
    /// Datagrams read.
    pub datagrams: [u64; 2],
    /// Longer than the receive buffer: dropped.
    pub truncated: [u64; 2],
    /// Refused by the feed's [`SeqExtractor`] (no seq, or not a whole packet: a copy cut short or mangled on
    /// this line): dropped before arbitration, so the other line's copy of that seq can still win.
    pub refused: [u64; 2],
    /// Datagrams by where their receive stamp came from: hardware, software, user (`CLOCK_REALTIME`).
    pub stamps: [[u64; 3]; 2],
}

/// Lines A and B, arbitrated. Single-threaded: the caller polls it.
pub struct LineReceiver<S: SeqExtractor> {
    lines: [LineSocket; 2],
    seq: S,
    arbiter: Arbiter,
    buf: Vec<u8>,
    counters: LineCounters,
}

impl<S: SeqExtractor> LineReceiver<S> {
    /// Opens both lines (see [`LineSocket::open`]) and allocates the buffers.
    pub fn open(cfg: &ReceiverConfig, seq: S) -> Result<Self, LineError> {
        Ok(Self {
            lines: [LineSocket::open(&cfg.a)?, LineSocket::open(&cfg.b)?],
            seq,
            arbiter: Arbiter::with_sources(cfg.arbiter.clone(), [&cfg.a.sources, &cfg.b.sources]),
            buf: vec![0; cfg.recv_buf_bytes],
            counters: LineCounters::default(),
        })
    }

    /// The socket of `line` (its bound address, its receive buffer). This receiver reads lines A and B only:
    /// [`Line::Recovery`] names line B's socket.
    pub fn socket(&self, line: Line) -> &LineSocket {
        match line {
            Line::A => &self.lines[0],
            Line::B | Line::Recovery => &self.lines[1],
        }
    }

    /// Counters before arbitration.
    pub fn line_counters(&self) -> &LineCounters {
        &self.counters
    }

    /// The arbiter's counters.
    pub fn arbiter_counters(&self) -> &ArbiterCounters {
        self.arbiter.counters()
    }

    /// The arbiter (its next seq, what waits).
    pub fn arbiter(&self) -> &Arbiter {
        &self.arbiter
    }

    /// Reports the run of missing seqs declared so far without waiting for the datagram that closes it (the end
    /// of a stream: see [`Arbiter::flush`]).
    pub fn flush(&mut self, out: &mut impl FnMut(Event<'_>)) {
        self.arbiter.flush(out);
    }

    /// Reads up to `budget` datagrams, alternating between the lines, and hands what the arbiter delivers to
    /// `out`; when both sockets were drained, applies the gap timeout at `now_ns` (the caller's clock, e.g.
    /// [`crate::realtime_ns`]).
    /// Returns the datagrams read. Makes no allocation.
    pub fn poll(&mut self, now_ns: u64, budget: usize, out: &mut impl FnMut(Event<'_>)) -> Result<usize, LineError> {
        let mut read = 0;
        let mut idle = [false; 2];
        while read < budget && !(idle[0] && idle[1]) {
            for line in [Line::A, Line::B] {
                let li = line.index();
                if idle[li] || read >= budget {
                    continue;
                }
                let Some(r) = self.lines[li].recv(&mut self.buf)? else {
                    idle[li] = true;
                    continue;
                };
                read += 1;
                let c = &mut self.counters;
                c.datagrams[li] += 1;
                match r.stamp {
                    StampKind::Hardware => c.stamps[li][0] += 1,
                    StampKind::Software => c.stamps[li][1] += 1,
                    StampKind::User | StampKind::None => c.stamps[li][2] += 1,
                }
                if r.truncated {
                    c.truncated[li] += 1;
                    continue;
                }
                let payload = &self.buf[..r.len];
                let Some(seq) = self.seq.seq(payload) else {
                    c.refused[li] += 1;
                    continue;
                };
                self.arbiter.offer(
                    Datagram { seq, line, ts_recv_ns: r.ts_recv_ns, stamp: r.stamp, src: r.src, payload },
                    now_ns,
                    out,
                );
            }
        }
        if idle[0] && idle[1] {
            // Both sockets drained: nothing queued can still fill a hole, so the timeout may decide.
            self.arbiter.tick(now_ns, out);
        }
        Ok(read)
    }
}
