//! Credit write-back: when a receiver whose consumed seq travels over the wire tells its sender how far it has
//! read.
//!
//! On shared memory the sender reads the receiver's consumed seq directly. Over RDMA the receiver RDMA-WRITEs it
//! (8 bytes, little-endian) into the sender's credit word, and the sender sees only what the last such write
//! carried. [`CreditWriter`] is that decision, without any I/O: the verbs receiver calls it on every release,
//! every poll and every credit completion, and posts the write it returns. One write is in flight at a time
//! (its 8-byte source must not change under the NIC).
//!
//! The rules:
//! - a release that puts the receiver `credit_every` or more records past the last credit sends one;
//! - a release while a credit is in flight waits for its completion, which then sends the latest seq if the
//!   threshold was crossed meanwhile (or a flush was asked for).
//!
//! Memory: a few words; no allocation.

/// The credit policy of one receiver. See the module docs.
#[derive(Debug, Clone)]
pub struct CreditWriter {
    every: u64,
    /// Highest seq released by the reader.
    consumed: u64,
    /// The seq the last posted credit carried.
    sent: u64,
    in_flight: bool,
    /// A flush was asked for while a credit was in flight.
    flush_wanted: bool,
}

impl CreditWriter {
    /// A writer that credits every `credit_every` released records (at least 1). Nothing is released yet; the
    /// caller posts the first credit (seq 0, which tells the sender the receiver is connected) itself and reports
    /// it with [`CreditWriter::posted`].
    pub fn new(credit_every: u64) -> CreditWriter {
        CreditWriter { every: credit_every.max(1), consumed: 0, sent: 0, in_flight: false, flush_wanted: false }
    }

    /// Released records per credit.
    pub fn every(&self) -> u64 {
        self.every
    }

    /// The highest seq released.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The seq the last posted credit carried.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Whether a credit write is in flight (posted, completion not yet reaped).
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The reader released every seq up to `consumed_seq`. Returns the seq to post now, if any.
    #[inline]
    pub fn on_release(&mut self, consumed_seq: u64) -> Option<u64> {
        self.consumed = consumed_seq;
        if !self.in_flight && self.owed_by_threshold() {
            return Some(self.consumed);
        }
        None
    }

    /// A poll of the CQ found no completion at all. Returns the seq to post now, if any.
    #[inline]
    pub fn on_empty_poll(&mut self) -> Option<u64> {
        None
    }

    /// A poll delivered a record completion.
    #[inline]
    pub fn on_record(&mut self) {}

    /// The credit write in flight completed. Returns the seq to post now, if any.
    #[inline]
    pub fn on_complete(&mut self) -> Option<u64> {
        self.in_flight = false;
        if self.flush_wanted || self.owed_by_threshold() {
            return Some(self.consumed);
        }
        None
    }

    /// Asks for the latest released seq to be sent even below the threshold: now (the returned seq), or when the
    /// credit in flight completes.
    pub fn flush(&mut self) -> Option<u64> {
        if self.consumed == self.sent {
            return None;
        }
        if self.in_flight {
            self.flush_wanted = true;
            return None;
        }
        Some(self.consumed)
    }

    /// The caller posted a credit carrying `seq` (one this writer returned).
    #[inline]
    pub fn posted(&mut self, seq: u64) {
        self.sent = seq;
        self.in_flight = true;
        self.flush_wanted = false;
    }

    #[inline]
    fn owed_by_threshold(&self) -> bool {
        self.consumed.wrapping_sub(self.sent) >= self.every
    }
}
