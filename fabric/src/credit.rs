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
//!   threshold was crossed meanwhile (or a flush was asked for);
//! - a receiver that has released more than it credited and then finds its CQ empty for [`IDLE_CREDIT_POLLS`]
//!   polls in a row sends the rest. Without this the last partial batch is never credited once traffic stops,
//!   and a sender that needs to see everything consumed (after a `resync` skip, or to know a subscriber is
//!   idle) waits forever. A busy stream never goes idle, so it pays nothing; a stream that goes quiet pays one
//!   credit write per quiet period.
//!
//! Memory: a few words; no allocation.

/// Consecutive empty CQ polls after which a receiver credits what it released below the threshold. A busy-polling
/// receiver makes them in tens of microseconds on a NIC; one that yields between polls, in a few milliseconds.
pub const IDLE_CREDIT_POLLS: u32 = 1024;

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
    /// Empty polls in a row while something is owed.
    idle_polls: u32,
}

impl CreditWriter {
    /// A writer that credits every `credit_every` released records (at least 1). Nothing is released yet; the
    /// caller posts the first credit (seq 0, which tells the sender the receiver is connected) itself and reports
    /// it with [`CreditWriter::posted`].
    pub fn new(credit_every: u64) -> CreditWriter {
        CreditWriter {
            every: credit_every.max(1),
            consumed: 0,
            sent: 0,
            in_flight: false,
            flush_wanted: false,
            idle_polls: 0,
        }
    }

    /// Released records per credit.
    pub fn every(&self) -> u64 {
        self.every
    }

    /// The seq the last posted credit carried.
    pub fn sent(&self) -> u64 {
        self.sent
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

    /// A poll of the CQ found no completion at all. Returns the seq to post now, if any: after
    /// [`IDLE_CREDIT_POLLS`] such polls in a row with released records not yet credited.
    #[inline]
    pub fn on_empty_poll(&mut self) -> Option<u64> {
        if self.in_flight || self.consumed == self.sent {
            self.idle_polls = 0;
            return None;
        }
        self.idle_polls += 1;
        if self.idle_polls < IDLE_CREDIT_POLLS {
            return None;
        }
        self.idle_polls = 0;
        Some(self.consumed)
    }

    /// A poll delivered a record completion: the stream is not idle.
    #[inline]
    pub fn on_record(&mut self) {
        self.idle_polls = 0;
    }

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
        self.idle_polls = 0;
    }

    #[inline]
    fn owed_by_threshold(&self) -> bool {
        self.consumed.wrapping_sub(self.sent) >= self.every
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credit_goes_out_every_credit_every_releases() {
        let mut w = CreditWriter::new(4);
        assert_eq!(w.on_release(3), None);
        assert_eq!(w.on_release(4), Some(4));
        w.posted(4);
        // in flight: the next threshold waits for the completion, which sends the latest seq
        assert_eq!(w.on_release(9), None);
        assert_eq!(w.on_release(10), None);
        assert_eq!(w.on_complete(), Some(10));
    }

    #[test]
    fn the_last_partial_batch_goes_out_after_the_cq_stays_empty() {
        let mut w = CreditWriter::new(128);
        w.posted(0);
        assert_eq!(w.on_complete(), None);
        w.on_record();
        assert_eq!(w.on_release(100), None);
        for _ in 1..IDLE_CREDIT_POLLS {
            assert_eq!(w.on_empty_poll(), None);
        }
        assert_eq!(w.on_empty_poll(), Some(100));
        w.posted(100);
        // nothing more owed: idle polls never send again
        assert_eq!(w.on_complete(), None);
        for _ in 0..3 * IDLE_CREDIT_POLLS {
            assert_eq!(w.on_empty_poll(), None);
        }
    }

    #[test]
    fn a_record_restarts_the_idle_count() {
        let mut w = CreditWriter::new(128);
        assert_eq!(w.on_release(5), None);
        for _ in 1..IDLE_CREDIT_POLLS {
            assert_eq!(w.on_empty_poll(), None);
        }
        w.on_record();
        assert_eq!(w.on_release(6), None);
        assert_eq!(w.on_empty_poll(), None);
    }

    #[test]
    fn a_flush_during_a_credit_in_flight_is_sent_at_its_completion() {
        let mut w = CreditWriter::new(64);
        w.posted(0);
        assert_eq!(w.on_release(7), None);
        assert_eq!(w.flush(), None);
        assert_eq!(w.on_complete(), Some(7));
        w.posted(7);
        assert_eq!(w.on_complete(), None);
        assert_eq!(w.flush(), None, "nothing new to say");
    }
}
