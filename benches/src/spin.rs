//! Spin-wait bookkeeping shared by the peer baselines' ping-pongs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;

/// A PAUSE per empty poll, and every 1,024 of them a look at the stop flag and the clock.
pub struct Wait<'a> {
    /// Names the baseline in errors (`aeron`, `iceoryx2`).
    peer: &'static str,
    stop: &'a AtomicBool,
    spins: u32,
    since: Option<Instant>,
}

impl<'a> Wait<'a> {
    pub fn new(peer: &'static str, stop: &'a AtomicBool) -> Self {
        Wait { peer, stop, spins: 0, since: None }
    }

    /// One empty poll; an error once the peer gave up or `timeout` passed since this wait began.
    #[inline]
    pub fn idle(&mut self, timeout: Duration, what: &dyn Fn() -> String) -> anyhow::Result<()> {
        std::hint::spin_loop();
        self.spins = self.spins.wrapping_add(1);
        if self.spins.is_multiple_of(1024) {
            self.check(timeout, what)?;
        }
        Ok(())
    }

    #[cold]
    fn check(&mut self, timeout: Duration, what: &dyn Fn() -> String) -> anyhow::Result<()> {
        if self.stop.load(Ordering::Acquire) {
            bail!("{}: {}: the other side stopped", self.peer, what());
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() > timeout {
            bail!("{}: {}: nothing for {timeout:?}", self.peer, what());
        }
        Ok(())
    }

    pub fn reset(&mut self) {
        self.spins = 0;
        self.since = None;
    }
}
