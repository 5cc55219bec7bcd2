//! Who may subscribe, to what, how often they may fail or ask, and how what they send is shown in logs.
//!
//! - [`check_subscribe`]: the shape of a `Subscribe` before anything else looks at it: a name of at most
//!   [`MAX_NAME_BYTES`] with no control character, at most [`MAX_INSTRUMENTS`] instrument_ids (de-duplicated: a
//!   list of 23,500 copies of one id is one id) and [`MAX_SYMBOLS`] symbols of at most [`MAX_SYMBOL_BYTES`],
//!   neither list empty. Nothing a peer sends can then make the publisher build a frame larger than a bound.
//! - [`authenticate`]: the `[access]` entry of the name, its token compared in constant time, and the uid the
//!   token is bound to (`uid` in the entry) against the connection's; [`entitled_filter`]: what it may receive (a
//!   subscriber asking for everything gets its entitlement).
//! - [`AuthThrottle`]: failed authentications per peer (address and local user), with a summary line per
//!   interval instead of a line per try.
//! - [`TokenBucket`]: the per-session snapshot request limit.
//! - [`shown`]: any string a peer chose, escaped (no control character reaches a log line) and cut to a bound.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use mdfan_wire::control::Subscribe;
use mdfan_wire::Symbology;

use crate::config::{AccessEntry, AccessSection};

/// Longest subscriber name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;
/// Most instrument_ids one `Subscribe` may name (after de-duplication).
pub const MAX_INSTRUMENTS: usize = 16_384;
/// Most symbols one `Subscribe` may name.
pub const MAX_SYMBOLS: usize = 4_096;
/// Longest symbol, in bytes.
pub const MAX_SYMBOL_BYTES: usize = 64;
/// Longest peer-chosen text (a `Bye`'s detail) shown in a log line, in bytes.
pub const MAX_SHOWN_BYTES: usize = 256;

/// `text` as a log line may carry it: every control character (newline, ESC, ...) and backslash escaped
/// (`\n`, `\u{1b}`, `\\`), cut to `max` bytes with the length left out said (`...(+N bytes)`). A peer's name or
/// detail can then never end a line and start a forged one, in the text log format as in the JSON one.
pub fn shown(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 16);
    for (at, c) in text.char_indices() {
        if out.len() >= max {
            out.push_str(&format!("...(+{} bytes)", text.len() - at));
            break;
        }
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    out
}

/// A subscriber name as logs and reports show it ([`shown`] to [`MAX_NAME_BYTES`]).
pub fn shown_name(name: &str) -> String {
    shown(name, MAX_NAME_BYTES)
}

/// Checks the shape of `sub` and normalises it: instrument_ids sorted and de-duplicated. Runs before any other
/// check, before authentication.
///
/// # Errors
/// The reason for a `Reject`, naming the field: a name that is empty, too long or holds a control character;
/// an empty or too long instrument or symbol list; a symbol too long.
pub fn check_subscribe(sub: &mut Subscribe) -> Result<(), String> {
    if sub.name.is_empty() {
        return Err("field name: empty".into());
    }
    if sub.name.len() > MAX_NAME_BYTES {
        return Err(format!("field name: {} bytes, at most {MAX_NAME_BYTES}", sub.name.len()));
    }
    if let Some(at) = sub.name.find(|c: char| c.is_control()) {
        return Err(format!("field name: a control character at byte {at} (names are printable text)"));
    }
    if let Some(ids) = &mut sub.instruments {
        if ids.is_empty() {
            return Err("field instruments: empty (leave it out to get every instrument)".into());
        }
        ids.sort_unstable();
        ids.dedup();
        if ids.len() > MAX_INSTRUMENTS {
            return Err(format!("field instruments: {} distinct ids, at most {MAX_INSTRUMENTS}", ids.len()));
        }
    }
    if let Some(symbols) = &sub.symbols {
        if symbols.is_empty() {
            return Err("field symbols: empty (leave it out to get every instrument)".into());
        }
        if symbols.len() > MAX_SYMBOLS {
            return Err(format!("field symbols: {} symbols, at most {MAX_SYMBOLS}", symbols.len()));
        }
        if let Some(s) = symbols.iter().find(|s| s.len() > MAX_SYMBOL_BYTES || s.contains(|c: char| c.is_control())) {
            return Err(format!(
                "field symbols: {:?} is not a symbol (at most {MAX_SYMBOL_BYTES} bytes of printable text)",
                shown(s, MAX_SYMBOL_BYTES)
            ));
        }
    }
    Ok(())
}

/// The `[access]` entry of `sub`'s name if its token matches (compared in constant time) and, when the entry
/// binds the token to a uid, the connection's local user `peer_uid` is that uid. The reason for a `Reject`
/// otherwise. An unknown name and a wrong token read the same, so a refusal does not tell which names exist;
/// only a peer holding the right token learns that it connected as the wrong user.
pub fn authenticate<'a>(
    access: &'a AccessSection,
    sub: &Subscribe,
    peer_uid: Option<u32>,
) -> Result<&'a AccessEntry, String> {
    use subtle::ConstantTimeEq as _;
    let name = shown_name(&sub.name);
    let Some(token) = &sub.token else {
        return Err(format!(
            "field token: missing: this publisher authenticates its subscribers (\"{name}\" sent none)"
        ));
    };
    let entry = access.subscribers.iter().find(|e| e.name == sub.name);
    let e = match entry {
        Some(e) if bool::from(e.token.as_bytes().ct_eq(token.as_bytes())) => e,
        _ => return Err(format!("field token: not accepted for subscriber \"{name}\"")),
    };
    match (e.uid, peer_uid) {
        (Some(want), Some(got)) if want == got => Ok(e),
        (Some(want), got) => Err(format!(
            "field token: subscriber \"{name}\"'s token is bound to {}; this connection is {}",
            mdfan_fabric::shm::user_label(want),
            got.map_or_else(|| "from an unknown user (not on this host)".to_owned(), mdfan_fabric::shm::user_label)
        )),
        (None, _) => Ok(e),
    }
}

/// What `sub` (authenticated as `entry`) will receive: its own instrument list when its entitlement covers it,
/// its entitlement when it asked for everything, every instrument when it has no entitlement list.
///
/// # Errors
/// The reason for a `Reject`: ids it is not entitled to, named with what it may have.
pub fn entitled_filter(entry: &AccessEntry, sub: &Subscribe) -> Result<Option<Vec<u32>>, String> {
    let Some(allowed) = &entry.instruments else { return Ok(sub.instruments.clone()) };
    let may = || allowed.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    match &sub.instruments {
        None => {
            let mut ids = allowed.clone();
            ids.sort_unstable();
            ids.dedup();
            Ok(Some(ids))
        }
        Some(ids) => {
            let refused: Vec<String> = ids.iter().filter(|id| !allowed.contains(id)).map(u32::to_string).collect();
            if refused.is_empty() {
                Ok(Some(ids.clone()))
            } else {
                Err(format!(
                    "field instruments: {} not entitled; \"{}\" may have {}",
                    refused.join(","),
                    shown_name(&sub.name),
                    may()
                ))
            }
        }
    }
}

/// Turns the symbols `sub` names into instrument_ids added to its `instruments` (which then filter: a
/// subscriber naming only symbols gets only those), and leaves `symbols` empty. Every instrument_id of a
/// symbol counts (more than one when the symbol named several instruments over the feed's dates).
///
/// # Errors
/// The reason for a `Reject`: a symbol this publisher does not know (named, with how many it knows), an
/// empty or too long list.
pub fn resolve_symbols(symbology: &Symbology, sub: &mut Subscribe) -> Result<(), String> {
    let Some(symbols) = sub.symbols.take() else { return Ok(()) };
    if symbols.is_empty() {
        return Err("field symbols: empty (leave it out to get every instrument)".into());
    }
    if symbols.len() > MAX_SYMBOLS {
        return Err(format!("field symbols: {} symbols, at most {MAX_SYMBOLS}", symbols.len()));
    }
    let mut ids = sub.instruments.take().unwrap_or_default();
    let mut unknown = Vec::new();
    for symbol in &symbols {
        match symbology.ids_of(symbol) {
            found if found.is_empty() => unknown.push(shown(symbol, MAX_SYMBOL_BYTES)),
            found => ids.extend(found),
        }
    }
    if !unknown.is_empty() {
        let unknown: Vec<&str> = unknown.iter().map(String::as_str).collect();
        let known: Vec<&str> = symbology.iter().map(|d| d.symbol.as_str()).collect();
        let have = match known.len() {
            0 => {
                "it knows no symbols yet: no symbol mappings, symbol file or definition the feed gave so far".to_owned()
            }
            1 => format!("it knows 1 symbol: {}", known[0]),
            n => format!("it knows {n} symbols: {}", text_list(&known)),
        };
        return Err(format!("field symbols: {} not known to this publisher ({have})", text_list(&unknown)));
    }
    ids.sort_unstable();
    ids.dedup();
    if ids.len() > MAX_INSTRUMENTS {
        return Err(format!("field symbols: they name {} instruments, at most {MAX_INSTRUMENTS}", ids.len()));
    }
    sub.instruments = Some(ids);
    Ok(())
}

/// Strings for a message: at most 20, then how many more.
pub(crate) fn text_list(items: &[&str]) -> String {
    const SHOWN: usize = 20;
    let mut text = items.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
    if items.len() > SHOWN {
        text.push_str(&format!(" and {} more", items.len() - SHOWN));
    }
    text
}

/// Ids for a message: at most 20, then how many more.
pub(crate) fn id_list(ids: &[u32]) -> String {
    const SHOWN: usize = 20;
    let mut text = ids.iter().take(SHOWN).map(u32::to_string).collect::<Vec<_>>().join(", ");
    if ids.len() > SHOWN {
        text.push_str(&format!(" and {} more", ids.len() - SHOWN));
    }
    text
}

/// Failed authentications allowed per peer in one [`AUTH_WINDOW`]; past them its subscriptions are refused
/// unchecked until the window ends.
pub const AUTH_FAILURES_PER_WINDOW: u32 = 10;
/// The throttling window, and the interval of the summary lines.
pub const AUTH_WINDOW: Duration = Duration::from_secs(10);
/// Failed authentications logged one by one per peer and window; the rest go into its summary line.
pub const AUTH_LOGGED_PER_WINDOW: u32 = 3;
/// Peers tracked at once (older windows are forgotten first).
const AUTH_PEERS: usize = 4_096;

/// The key failures are counted under: the peer's address and its local user (on loopback every local user
/// shares 127.0.0.1: one user failing must not lock out the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerKey {
    /// The peer's IP address (`None`: a Unix-domain peer).
    pub ip: Option<IpAddr>,
    /// Its local user, when known.
    pub uid: Option<u32>,
}

impl std::fmt::Display for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip {
            Some(ip) => write!(f, "{ip}")?,
            None => f.write_str("unix")?,
        }
        match self.uid {
            Some(uid) => write!(f, " uid {uid}"),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    failures: u32,
    refused: u32,
    logged: u32,
}

/// Failed authentications per peer ([`PeerKey`]) in fixed windows of [`AUTH_WINDOW`] (see the constants).
#[derive(Debug, Default)]
pub struct AuthThrottle {
    peers: HashMap<PeerKey, Window>,
    /// Windows that ended when their peer failed again, before [`AuthThrottle::summaries`] came to them.
    ended: Vec<(PeerKey, Window)>,
    /// Failed authentications, in all.
    pub failures: u64,
    /// Subscriptions refused unchecked because their peer had failed too often.
    pub refused: u64,
}

/// What to do with one failed authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureLog {
    /// Log it on a line of its own.
    Line,
    /// Count it only: the peer's summary line will.
    Quiet,
}

impl AuthThrottle {
    /// `Err(reason)` when `key` has failed [`AUTH_FAILURES_PER_WINDOW`] times in its current window: the
    /// subscription is refused without looking at its token (counted).
    pub fn check(&mut self, key: PeerKey, now: Instant) -> Result<(), String> {
        let Some(w) = self.peers.get_mut(&key) else { return Ok(()) };
        if now.duration_since(w.start) >= AUTH_WINDOW || w.failures < AUTH_FAILURES_PER_WINDOW {
            return Ok(());
        }
        w.refused += 1;
        self.refused += 1;
        let left = AUTH_WINDOW.saturating_sub(now.duration_since(w.start));
        Err(format!(
            "too many failed authentications from {key}: {} in {} s; try again in {} ms",
            w.failures,
            AUTH_WINDOW.as_secs(),
            left.as_millis()
        ))
    }

    /// Counts a failed authentication of `key`; says whether to log it on its own line.
    pub fn failed(&mut self, key: PeerKey, now: Instant) -> FailureLog {
        self.failures += 1;
        if self.peers.len() >= AUTH_PEERS && !self.peers.contains_key(&key) {
            let oldest = self.peers.iter().min_by_key(|(_, w)| w.start).map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.peers.remove(&k);
            }
        }
        let fresh = Window { start: now, failures: 0, refused: 0, logged: 0 };
        let w = self.peers.entry(key).or_insert(fresh);
        if now.duration_since(w.start) >= AUTH_WINDOW {
            // Its window is over: the failure opens the next one (the old one is summarised as it was).
            self.ended.push((key, std::mem::replace(w, fresh)));
        }
        w.failures += 1;
        if w.logged < AUTH_LOGGED_PER_WINDOW {
            w.logged += 1;
            FailureLog::Line
        } else {
            FailureLog::Quiet
        }
    }

    /// The windows that ended by `now` and held more than their logged lines said: one summary per peer,
    /// `(peer, failures, refused unchecked)`; ended windows are forgotten.
    pub fn summaries(&mut self, now: Instant) -> Vec<(PeerKey, u32, u32)> {
        let mut out: Vec<_> = self
            .ended
            .drain(..)
            .filter(|(_, w)| w.failures > w.logged || w.refused > 0)
            .map(|(key, w)| (key, w.failures, w.refused))
            .collect();
        self.peers.retain(|key, w| {
            let over = now.duration_since(w.start) >= AUTH_WINDOW;
            if over && (w.failures > w.logged || w.refused > 0) {
                out.push((*key, w.failures, w.refused));
            }
            !over
        });
        out
    }
}

/// A token bucket: `rate` tokens a second, holding at most `rate` (at least 1).
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    tokens: f64,
    rate: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket refilled at `rate_per_s`.
    pub fn new(rate_per_s: u32, now: Instant) -> TokenBucket {
        let rate = f64::from(rate_per_s.max(1));
        TokenBucket { tokens: rate, rate, at: now }
    }

    /// Takes a token if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mdfan_wire::control::{RingGrant, SlowConsumerPolicy};
    use mdfan_wire::InstrumentDef;

    pub(crate) fn symbology() -> Symbology {
        let six_c = InstrumentDef {
            display_factor_e9: 100_000,
            tick_size_e9: 500_000_000,
            ..InstrumentDef::new(174969, "6CZ6")
        };
        [InstrumentDef::new(17077, "ESH4"), six_c].into_iter().collect()
    }

    pub(crate) fn sub(instruments: Option<Vec<u32>>, symbols: Option<&[&str]>) -> Subscribe {
        Subscribe {
            name: "a".into(),
            instruments,
            symbols: symbols.map(|s| s.iter().map(|s| s.to_string()).collect()),
            ring: RingGrant::Shm { path: "/dev/shm/x".into(), slot_count: 64 },
            policy: SlowConsumerPolicy::Resync,
            snapshot: true,
            token: None,
        }
    }

    #[test]
    fn symbols_resolve_into_the_instrument_filter() {
        let s = symbology();
        let mut only = sub(None, Some(&["ESH4"]));
        resolve_symbols(&s, &mut only).unwrap();
        assert_eq!((only.instruments, only.symbols), (Some(vec![17077]), None));
        let mut both = sub(Some(vec![174969, 9]), Some(&["ESH4", "6CZ6"]));
        resolve_symbols(&s, &mut both).unwrap();
        assert_eq!(both.instruments, Some(vec![9, 17077, 174969]));
        let mut none = sub(Some(vec![9]), None);
        resolve_symbols(&s, &mut none).unwrap();
        assert_eq!(none.instruments, Some(vec![9]));
    }

    #[test]
    fn an_unknown_symbol_is_refused_by_name_with_what_is_known() {
        let e = resolve_symbols(&symbology(), &mut sub(None, Some(&["ESH4", "XYZ", "esh4"]))).unwrap_err();
        assert_eq!(e, "field symbols: XYZ, esh4 not known to this publisher (it knows 2 symbols: ESH4, 6CZ6)");
        let one: Symbology = [InstrumentDef::new(17077, "ESH4")].into_iter().collect();
        let e = resolve_symbols(&one, &mut sub(None, Some(&["XYZ"]))).unwrap_err();
        assert_eq!(e, "field symbols: XYZ not known to this publisher (it knows 1 symbol: ESH4)");
        let e = resolve_symbols(&Symbology::new(), &mut sub(None, Some(&["XYZ"]))).unwrap_err();
        assert!(
            e.ends_with(
                "(it knows no symbols yet: no symbol mappings, symbol file or definition the feed gave so far)"
            ),
            "{e}"
        );
        let e = resolve_symbols(&symbology(), &mut sub(None, Some(&[]))).unwrap_err();
        assert_eq!(e, "field symbols: empty (leave it out to get every instrument)");
    }

    /// 23,500 copies of one id are one id (the Accept carries one definition); lists past the caps, empty lists,
    /// and names with control characters are refused naming the field.
    #[test]
    fn a_subscribe_is_bounded_and_de_duplicated_before_anything_looks_at_it() {
        let mut copies = sub(Some(vec![17077; 23_500]), None);
        check_subscribe(&mut copies).unwrap();
        assert_eq!(copies.instruments, Some(vec![17077]));
        let mut many = sub(Some((0..MAX_INSTRUMENTS as u32 + 1).collect()), None);
        assert_eq!(check_subscribe(&mut many).unwrap_err(), "field instruments: 16385 distinct ids, at most 16384");
        let mut empty = sub(Some(vec![]), None);
        assert_eq!(
            check_subscribe(&mut empty).unwrap_err(),
            "field instruments: empty (leave it out to get every instrument)"
        );
        let syms: Vec<String> = (0..MAX_SYMBOLS + 1).map(|i| format!("S{i}")).collect();
        let syms: Vec<&str> = syms.iter().map(String::as_str).collect();
        assert_eq!(
            check_subscribe(&mut sub(None, Some(&syms))).unwrap_err(),
            "field symbols: 4097 symbols, at most 4096"
        );
        let long = "X".repeat(65);
        assert!(check_subscribe(&mut sub(None, Some(&[&long]))).unwrap_err().starts_with("field symbols: \"XXXX"));
        let mut forged = sub(None, None);
        forged.name = "strategy-z\nINFO mdfan_audit: subscriber attached".into();
        assert_eq!(
            check_subscribe(&mut forged).unwrap_err(),
            "field name: a control character at byte 10 (names are printable text)"
        );
        forged.name = "x".repeat(2 << 20);
        assert_eq!(check_subscribe(&mut forged).unwrap_err(), "field name: 2097152 bytes, at most 64");
    }

    #[test]
    fn shown_text_never_holds_a_control_character_and_is_bounded() {
        assert_eq!(shown("a\nb\u{1b}[31mc\\", 64), "a\\nb\\u{1b}[31mc\\\\");
        let long = shown(&"y".repeat(1000), 8);
        assert_eq!(long, "yyyyyyyy...(+992 bytes)");
        assert!(!shown("\u{7f}\u{85}\r\t", 64).chars().any(char::is_control));
    }

    #[test]
    fn failed_authentications_are_throttled_per_peer_and_user_and_summarised_per_window() {
        let t0 = Instant::now();
        let mut th = AuthThrottle::default();
        let a = PeerKey { ip: Some("127.0.0.1".parse().unwrap()), uid: Some(1002) };
        let b = PeerKey { uid: Some(1001), ..a };
        let logged: Vec<FailureLog> = (0..AUTH_FAILURES_PER_WINDOW).map(|_| th.failed(a, t0)).collect();
        assert_eq!(logged.iter().filter(|l| **l == FailureLog::Line).count(), 3);
        let e = th.check(a, t0 + Duration::from_secs(1)).unwrap_err();
        assert_eq!(e, "too many failed authentications from 127.0.0.1 uid 1002: 10 in 10 s; try again in 9000 ms");
        assert!(th.check(b, t0).is_ok(), "another local user on the same address is not locked out");
        assert_eq!((th.failures, th.refused), (10, 1));
        assert!(th.summaries(t0 + Duration::from_secs(5)).is_empty(), "the window is still open");
        assert_eq!(th.summaries(t0 + AUTH_WINDOW), [(a, 10, 1)]);
        assert!(th.check(a, t0 + AUTH_WINDOW).is_ok(), "a new window");
        // Failures right after a window ends, before its summary is taken, open the next window: ten of them
        // lock the peer out again, and both windows are summarised.
        let t1 = t0 + 2 * AUTH_WINDOW;
        (0..AUTH_FAILURES_PER_WINDOW).for_each(|_| _ = th.failed(a, t0 + Duration::from_secs(1)));
        (0..AUTH_FAILURES_PER_WINDOW).for_each(|_| _ = th.failed(a, t1));
        assert!(th.check(a, t1).is_err(), "locked out in the new window");
        assert_eq!(th.summaries(t1), [(a, 10, 0)], "the window that ended");
        assert_eq!(th.summaries(t1 + AUTH_WINDOW), [(a, 10, 1)]);
    }

    #[test]
    fn a_token_bucket_gives_its_rate_and_refills() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10, t0);
        assert_eq!((0..20).filter(|_| b.take(t0)).count(), 10);
        assert!(b.take(t0 + Duration::from_millis(100)), "one more after a tenth of a second");
        assert!(!b.take(t0 + Duration::from_millis(100)));
    }
}
