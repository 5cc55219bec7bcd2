//! `mdfan-publisher --config FILE`: replay a feed and fan it out to subscribers.
//!
//! Exit status: 0 after a complete replay, 1 on a config/feed/endpoint error (one line on stderr naming the
//! file, field or endpoint), 130 when stopped by SIGINT/SIGTERM (end of stream with the reason goes to every
//! subscriber first). SIGUSR1 prints every counter, each line starting with `counters ` (`counters subscriber ...`
//! per session, `counters replay ... end=running` for the hot loop). SIGHUP re-reads `[access]` (tokens and
//! entitlements, uids) from the config file, for new subscriptions; the hot loop is not touched. The first stdout
//! line is `publisher listening=HOST:PORT [unix=PATH] feed=... journal_records=N`.

mod serve;

fn main() {
    serve::main_as("mdfan-publisher")
}
