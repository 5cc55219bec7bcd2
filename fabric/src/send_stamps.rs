//! The publisher's send completions against the NIC clock: for each signalled WRITE, when it was posted (the
//! hot loop's TSC, the record's `ts_send_ticks`) and when the NIC completed it (the send CQ's completion
//! timestamp, extended across counter wraps with [`TickExtender`]).
//!
//! [`SendStampLog`] is the bookkeeping the verbs provider's sender side ([`crate::RemoteRing`]) does on the hot
//! path, kept here (pure, no `verbs` feature) so it is tested with recorded completion values: the post time of a
//! signalled WR is stored in a slot of a table allocated at attach (`send_queue_depth` entries, indexed by the
//! WR's staging slot `wr_id % send_queue_depth`, with the `wr_id` beside it so a stale entry is never paired);
//! when its WC is reaped with a timestamp, a [`SendStamp`] goes into a fixed buffer of [`SEND_STAMPS`] entries
//! that the caller takes ([`SendStampLog::take`]) after each flush. A stamp that finds the buffer full is
//! counted ([`SendStampLog::lost`]), not kept. No allocation after [`SendStampLog::new`], no syscall.
//!
//! The publisher maps both clocks onto `CLOCK_REALTIME` (the NIC's with [`crate::nic_clock::NicRealtime`]) and
//! records post-to-send-completion, `clock=nic` (`mdfan_publisher::send_clock`).
#![forbid(unsafe_code)]

use crate::nic_clock::{NicClock, TickExtender};

/// Stamps a [`SendStampLog`] holds between two [`SendStampLog::take`]s: four polls' worth of WCs (the verbs
/// provider reaps at most 16 per poll, and a flush reaps once; a write that finds the send queue full once more).
pub const SEND_STAMPS: usize = 64;

/// One signalled send WR that the NIC completed with a timestamp. 16 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendStamp {
    /// The TSC when the hot loop posted it (raw `quanta` counter), as far as the record's `ts_send_ticks` holds
    /// it: its low 32 bits. [`extend_tsc`] gives back the whole value from a later TSC read.
    pub post_tsc: u64,
    /// The send completion's NIC timestamp, in ticks of `hca_core_clock`, extended to 64 bits across counter
    /// wraps ([`TickExtender`]; the low `completion_timestamp_mask` bits are the raw value).
    pub nic_ticks: u64,
}

/// The whole TSC whose low 32 bits are `low`, read at most 2^32 ticks before `later` (a TSC read at or after it).
#[inline]
pub const fn extend_tsc(low: u32, later: u64) -> u64 {
    later.wrapping_sub((later as u32).wrapping_sub(low) as u64)
}

/// Post times of signalled WRs and the stamps of their completions (module docs).
#[derive(Debug)]
pub struct SendStampLog {
    /// Per staging slot: `(wr_id + 1, post TSC)` of the last signalled WR posted from it (0: none).
    posts: Box<[(u64, u64)]>,
    extender: TickExtender,
    stamps: [SendStamp; SEND_STAMPS],
    len: usize,
    lost: u64,
    unpaired: u64,
}

impl SendStampLog {
    /// A log for a send queue of `sq_depth` WRs (>= 1) whose CQ stamps completions with `clock`. Allocates the
    /// post table (`sq_depth * 16` bytes) here, never later.
    pub fn new(clock: NicClock, sq_depth: usize) -> SendStampLog {
        SendStampLog {
            posts: vec![(0, 0); sq_depth.max(1)].into_boxed_slice(),
            extender: TickExtender::new(clock),
            stamps: [SendStamp::default(); SEND_STAMPS],
            len: 0,
            lost: 0,
            unpaired: 0,
        }
    }

    /// Notes that signalled WR `wr_id` was posted from staging slot `slot` (`wr_id % sq_depth`) at TSC
    /// `post_tsc`. One store.
    #[inline]
    pub fn posted(&mut self, slot: usize, wr_id: u64, post_tsc: u64) {
        if let Some(p) = self.posts.get_mut(slot) {
            *p = (wr_id.wrapping_add(1), post_tsc);
        }
    }

    /// Forgets the post time of the WR in `slot` (a signalled WR posted without one, such as the shutdown
    /// fence: its completion is then not paired).
    pub fn clear(&mut self, slot: usize) {
        if let Some(p) = self.posts.get_mut(slot) {
            *p = (0, 0);
        }
    }

    /// A successful WC of signalled WR `wr_id` with raw completion timestamp `raw_ticks`: extends the timestamp
    /// (every one, in completion order, so the extension follows the counter) and keeps a [`SendStamp`] when
    /// the WR's post time is known. One division (`wr_id % sq_depth`) per signalled completion.
    #[inline]
    pub fn completed(&mut self, wr_id: u64, raw_ticks: u64) {
        let nic_ticks = self.extender.extend(raw_ticks);
        let slot = (wr_id % self.posts.len() as u64) as usize;
        let (id_plus_1, post_tsc) = self.posts[slot];
        if id_plus_1 != wr_id.wrapping_add(1) {
            self.unpaired += 1;
            return;
        }
        self.posts[slot] = (0, 0);
        if self.len == SEND_STAMPS {
            self.lost += 1;
            return;
        }
        self.stamps[self.len] = SendStamp { post_tsc, nic_ticks };
        self.len += 1;
    }

    /// The stamps kept since the last call, oldest first; the buffer is empty afterwards.
    #[inline]
    pub fn take(&mut self) -> &[SendStamp] {
        let n = self.len;
        self.len = 0;
        &self.stamps[..n]
    }

    /// Stamps not kept because the buffer was full (since creation).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Timestamped completions of WRs whose post time was not known (the shutdown fence; since creation).
    pub fn unpaired(&self) -> u64 {
        self.unpaired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASK48: u64 = (1 << 48) - 1;

    #[test]
    fn completions_pair_with_their_posts_and_extend_across_the_wrap() {
        // mlx5: 48-bit counter; a send queue of 4 WRs, every other one signalled
        let clock = NicClock::new(156_250, MASK48).unwrap();
        let mut log = SendStampLog::new(clock, 4);
        log.posted(1, 1, 1_000_000);
        log.posted(3, 3, 1_000_640);
        log.completed(1, MASK48 - 9); // 10 ticks before the counter wraps
        log.completed(3, 6); // 16 ticks later, after it
        assert_eq!(
            log.take(),
            &[
                SendStamp { post_tsc: 1_000_000, nic_ticks: MASK48 - 9 },
                SendStamp { post_tsc: 1_000_640, nic_ticks: MASK48 + 7 },
            ]
        );
        assert!(log.take().is_empty(), "taken once");
        // the table wraps too: wr 5 reuses slot 1
        log.posted(1, 5, 2_000_000);
        log.completed(5, 20);
        assert_eq!(log.take(), &[SendStamp { post_tsc: 2_000_000, nic_ticks: MASK48 + 21 }]);
        assert_eq!((log.lost(), log.unpaired()), (0, 0));
    }

    #[test]
    fn a_completion_without_its_post_is_counted_not_paired() {
        let clock = NicClock::new(1_000_000, MASK48).unwrap();
        let mut log = SendStampLog::new(clock, 4);
        log.posted(2, 2, 500);
        log.completed(6, 100); // slot 2 holds wr 2, not 6
        log.clear(2);
        log.completed(2, 200); // cleared (the fence)
        log.posted(0, 8, 900);
        log.completed(8, 300);
        log.completed(8, 400); // a second WC for the same WR has no post left
        assert_eq!(log.take(), &[SendStamp { post_tsc: 900, nic_ticks: 300 }]);
        assert_eq!(log.unpaired(), 3);
    }

    #[test]
    fn a_full_buffer_counts_what_it_cannot_keep() {
        let clock = NicClock::new(1_000_000, MASK48).unwrap();
        let n = SEND_STAMPS as u64 + 3;
        let mut log = SendStampLog::new(clock, n as usize);
        for id in 0..n {
            log.posted(id as usize, id, 10 * id);
            log.completed(id, 1_000 + id);
        }
        let kept = log.take();
        assert_eq!(kept.len(), SEND_STAMPS);
        assert_eq!(kept[SEND_STAMPS - 1], SendStamp { post_tsc: 10 * (SEND_STAMPS as u64 - 1), nic_ticks: 1_063 });
        assert_eq!(log.lost(), 3);
    }
}
