//! An rtrb producer with an overflow queue in front: what does not fit now is sent, in order, later. Used in
//! both directions between the conductor and the hot loop, so neither ever drops a command or an event.

use std::collections::VecDeque;

/// See the module docs. The overflow queue's capacity is preallocated by the owner; it grows only if the
/// other side stops draining.
pub struct Outbox<T> {
    tx: rtrb::Producer<T>,
    overflow: VecDeque<T>,
}

impl<T> Outbox<T> {
    /// An outbox over `tx` with room for `overflow_capacity` waiting items before it allocates.
    pub fn new(tx: rtrb::Producer<T>, overflow_capacity: usize) -> Outbox<T> {
        Outbox { tx, overflow: VecDeque::with_capacity(overflow_capacity) }
    }

    /// Sends `item` after everything still waiting.
    #[inline]
    pub fn send(&mut self, item: T) {
        if !self.overflow.is_empty() {
            self.overflow.push_back(item);
            return;
        }
        if let Err(rtrb::PushError::Full(item)) = self.tx.push(item) {
            self.overflow.push_back(item);
        }
    }

    /// Moves waiting items into the queue while it has room.
    #[inline]
    pub fn flush(&mut self) {
        while let Some(item) = self.overflow.pop_front() {
            if let Err(rtrb::PushError::Full(item)) = self.tx.push(item) {
                self.overflow.push_front(item);
                return;
            }
        }
    }

    /// Whether items are waiting.
    #[inline]
    pub fn has_waiting(&self) -> bool {
        !self.overflow.is_empty()
    }
}
