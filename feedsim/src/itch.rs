//! Nasdaq TotalView-ITCH 5.0 synthesised from DBN MBO (sans I/O): [`ItchEncoder`].
//!
//! Source: Nasdaq TotalView-ITCH 5.0 specification, section 4 (the layouts are the ones `mdfan_feed::itch`
//! decodes; its module docs give every offset). All integers big-endian; prices u32 with 4 implied decimals;
//! timestamps 6 bytes, ns since midnight US Eastern of the session date.
//!
//! ## Mapping
//!
//! Before the first record: System Event `S` (event code `O`, start of messages), then one Stock Directory `R`
//! per instrument of the DBN metadata's symbol mappings (ascending instrument_id), stock locate 1, 2, ... in
//! that order; an instrument_id met later without a mapping gets the next locate and an `R` before its first
//! message, its symbol the instrument_id in decimal. Symbols longer than 8 bytes are cut to 8 (counted in
//! [`EncoderStats::symbols_cut`]). Order reference numbers are ours, from 1 up, one per ITCH order; the encoder
//! keeps DBN (instrument_id, order_id) → the current ITCH reference and what ITCH believes rests there.
//!
//! | DBN action | ITCH |
//! |---|---|
//! | `A` add (side `B`/`A`) | `A` Add Order (buy/sell `B`/`S`, shares = size, price) |
//! | `C` cancel (size = shares off) | `X` Order Cancel of the shares off, or `D` Order Delete when none are left |
//! | `F` fill | `E` Order Executed (the fill's size, at most what rests in ITCH; match number = DBN sequence) |
//! | `M` modify | `U` Order Replace (new reference number, new shares and price) |
//! | `R` clear | `D` Order Delete per order resting on that instrument |
//! | `T` trade, side `B`/`A` | `P` Trade (non-cross), order reference 0, buy/sell of the DBN side (CME: the aggressor's), match number = DBN sequence |
//! | `T` with side `N`, `N` no action | nothing (counted in [`EncoderStats::skipped`]) |
//! | end of file ([`ItchEncoder::finish`]) | System Event `S` (event code `C`, end of messages) |
//!
//! CME MBO (as the bundled ESH4 files) reports a fill twice: an `F` (no book change in DBN) and then the
//! resting order's `C` or `M` that takes the shares off. ITCH's `E` takes the shares off itself, so the encoder
//! remembers the ITCH shares apart from the DBN size and emits for the later `C`/`M` only what is still needed
//! to make ITCH match the DBN book: nothing if the order already went at 0, an `X` for the rest, a `U` when the
//! price moves or ITCH holds fewer shares than DBN (more executed than DBN later takes off), an `A` (new
//! reference) when ITCH deleted an order DBN keeps. Decoded with `mdfan_feed::itch::ItchNormalizer` into
//! `mdfan_wire::Books`, the ITCH stream gives the DBN book (feedsim/tests/itch_encode.rs).
//!
//! ## What ITCH cannot carry (skipped and counted, never a panic)
//!
//! - A price that is negative, above 429,496.7295 (u32 max with 4 decimals) or finer than 1/10,000 (spread
//!   instruments quote negative prices): an add at such a price is skipped, and so is every later message of
//!   that order; a modify to such a price deletes the ITCH order (`D`). Both counted in
//!   [`EncoderStats::price_unrepresentable`]. Such an order is then missing from the ITCH book.
//! - A size of 0 on an add or modify, a side other than `B`/`A` on an add: skipped, counted in
//!   [`EncoderStats::skipped`].
//! - A message on an order the encoder does not know (cancel, fill, modify of an order never added): skipped,
//!   counted in [`EncoderStats::unknown_order`].
//! - More than 65,535 instruments: the rest are skipped, counted in [`EncoderStats::no_locate`].
//! - ts_event before the session's US Eastern midnight (a start-of-day snapshot of older orders) is stamped 0,
//!   at or after 24 h is stamped 24 h - 1 ns; both counted in [`EncoderStats::ts_clamped`].
//!
//! Allocation: the encoder writes each message into a caller-owned `Vec` it reuses; its order map grows with
//! the resting orders. It is a simulator's encoder, run before the play starts, not a hot path.

use std::collections::{BTreeMap, HashMap};

use mdfan_feed::dbn::DbnMboMsg;
use mdfan_wire::Symbology;

/// ns in a day: ITCH timestamps are below this.
pub const DAY_NS: u64 = 86_400_000_000_000;
/// 1e-9 price units per ITCH price unit (4 implied decimals).
const E9_PER_PRICE4: i64 = 100_000;

/// What the encoder did, by reason. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncoderStats {
    /// DBN records read.
    pub records: u64,
    /// ITCH messages written, by type byte.
    pub by_type: BTreeMap<u8, u64>,
    /// Records skipped: trades without a side, no-action records, zero sizes, adds without a side.
    pub skipped: u64,
    /// Records whose price ITCH cannot carry (negative, past u32 with 4 decimals, or finer than 1/10,000).
    pub price_unrepresentable: u64,
    /// Cancels, fills and modifies of an order the encoder does not know (or skipped for its price).
    pub unknown_order: u64,
    /// Records of instruments past the 65,535 stock locates.
    pub no_locate: u64,
    /// Timestamps moved into the session day (before its midnight, or 24 h or more after).
    pub ts_clamped: u64,
    /// Symbols cut to 8 bytes.
    pub symbols_cut: u64,
}

impl EncoderStats {
    /// ITCH messages written of one type.
    pub fn of(&self, msg_type: u8) -> u64 {
        self.by_type.get(&msg_type).copied().unwrap_or(0)
    }
    /// ITCH messages written, all types.
    pub fn messages(&self) -> u64 {
        self.by_type.values().sum()
    }
}

/// One order as ITCH sees it.
#[derive(Debug, Clone, Copy)]
struct ItchOrder {
    /// The current order reference number; 0 when ITCH holds no order for it now.
    reference: u64,
    buy_sell: u8,
    /// ITCH price units (4 decimals).
    price: u32,
    /// Shares resting in ITCH (0: the ITCH order is gone).
    shares: u32,
    /// The DBN size (what the DBN book holds).
    dbn_size: u32,
}

/// DBN MBO → ITCH 5.0 messages (module docs).
#[derive(Debug)]
pub struct ItchEncoder {
    midnight_ns: u64,
    symbols: Vec<(u32, String)>,
    locates: HashMap<u32, u16>,
    /// The Stock Directory's stock field, by locate (index 0 unused).
    stocks: Vec<[u8; 8]>,
    /// (instrument_id, DBN order_id) → the ITCH order.
    orders: HashMap<(u32, u64), ItchOrder>,
    next_reference: u64,
    started: bool,
    stats: EncoderStats,
    msg: Vec<u8>,
}

impl ItchEncoder {
    /// An encoder for the session whose US Eastern midnight is `midnight_ns` (ns since the UNIX epoch,
    /// `mdfan_feed::itch::eastern_midnight_ns`), with the instruments of `symbology` (the DBN metadata's).
    pub fn new(midnight_ns: u64, symbology: &Symbology) -> ItchEncoder {
        let mut symbols: Vec<(u32, String)> = symbology.iter().map(|d| (d.instrument_id, d.symbol.clone())).collect();
        symbols.sort_by_key(|s| s.0);
        ItchEncoder {
            midnight_ns,
            symbols,
            locates: HashMap::new(),
            stocks: vec![[b' '; 8]],
            orders: HashMap::new(),
            next_reference: 1,
            started: false,
            stats: EncoderStats::default(),
            msg: Vec::with_capacity(64),
        }
    }

    /// What was done so far.
    pub fn stats(&self) -> &EncoderStats {
        &self.stats
    }

    /// The stock locate given to an instrument_id, if any.
    pub fn locate(&self, instrument_id: u32) -> Option<u16> {
        self.locates.get(&instrument_id).copied()
    }

    /// ITCH orders resting now (all locates).
    pub fn resting_orders(&self) -> usize {
        self.orders.values().filter(|o| o.shares > 0).count()
    }

    /// Encodes one DBN MBO record; each ITCH message (without its length prefix) goes to `emit`.
    pub fn encode(&mut self, m: &DbnMboMsg, emit: &mut impl FnMut(&[u8])) {
        self.stats.records += 1;
        let ts = self.timestamp(m.hd.ts_event);
        if !self.started {
            self.started = true;
            self.system_event(ts, b'O', emit);
            for (id, sym) in std::mem::take(&mut self.symbols) {
                self.directory(id, &sym, ts, emit);
            }
        }
        let id = m.hd.instrument_id;
        let locate = match self.locates.get(&id) {
            Some(&l) => l,
            None => match self.directory(id, &id.to_string(), ts, emit) {
                Some(l) => l,
                None => {
                    self.stats.no_locate += 1;
                    return;
                }
            },
        };
        let key = (id, m.order_id);
        let size = m.size;
        match m.action as u8 {
            b'A' => {
                let Some(buy_sell) = buy_sell(m.side as u8) else { return self.stats.skipped += 1 };
                if size == 0 {
                    return self.stats.skipped += 1;
                }
                let Some(price) = price4(m.price) else { return self.stats.price_unrepresentable += 1 };
                // A reused order id replaces what ITCH holds for it (DBN's book does the same on a modify).
                if let Some(old) = self.orders.remove(&key) {
                    self.delete(locate, ts, &old, emit);
                }
                let mut o = ItchOrder { reference: 0, buy_sell, price, shares: 0, dbn_size: size };
                self.add(locate, ts, &mut o, size, emit);
                self.orders.insert(key, o);
            }
            b'C' => {
                let Some(mut o) = self.orders.remove(&key) else { return self.stats.unknown_order += 1 };
                o.dbn_size = o.dbn_size.saturating_sub(size);
                if o.dbn_size == 0 {
                    self.delete(locate, ts, &o, emit);
                } else {
                    let price = o.price;
                    self.reconcile(locate, ts, &mut o, price, emit);
                    self.orders.insert(key, o);
                }
            }
            b'F' => {
                let Some(o) = self.orders.get_mut(&key) else { return self.stats.unknown_order += 1 };
                let executed = size.min(o.shares);
                if executed == 0 {
                    return self.stats.skipped += 1;
                }
                o.shares -= executed;
                let reference = o.reference;
                if o.shares == 0 {
                    o.reference = 0;
                }
                self.start(b'E', locate, ts);
                self.msg.extend_from_slice(&reference.to_be_bytes());
                self.msg.extend_from_slice(&executed.to_be_bytes());
                self.msg.extend_from_slice(&u64::from(m.sequence).to_be_bytes());
                self.emit(emit);
            }
            b'M' => {
                let Some(mut o) = self.orders.remove(&key) else { return self.stats.unknown_order += 1 };
                let Some(price) = price4(m.price) else {
                    self.stats.price_unrepresentable += 1;
                    return self.delete(locate, ts, &o, emit);
                };
                if size == 0 {
                    self.stats.skipped += 1;
                    return self.delete(locate, ts, &o, emit);
                }
                o.dbn_size = size;
                self.reconcile(locate, ts, &mut o, price, emit);
                self.orders.insert(key, o);
            }
            b'R' => {
                let mut gone: Vec<(u64, ItchOrder)> = Vec::new();
                self.orders.retain(|&(inst, order_id), o| {
                    if inst == id {
                        gone.push((order_id, *o));
                    }
                    inst != id
                });
                // Deterministic output: by DBN order_id.
                gone.sort_unstable_by_key(|g| g.0);
                for (_, o) in gone {
                    self.delete(locate, ts, &o, emit);
                }
            }
            b'T' => {
                let (Some(buy_sell), Some(price)) = (buy_sell(m.side as u8), price4(m.price)) else {
                    return self.stats.skipped += 1;
                };
                self.start(b'P', locate, ts);
                self.msg.extend_from_slice(&0u64.to_be_bytes());
                self.msg.push(buy_sell);
                self.msg.extend_from_slice(&size.to_be_bytes());
                self.msg.extend_from_slice(&self.stock_of_locate(locate));
                self.msg.extend_from_slice(&price.to_be_bytes());
                self.msg.extend_from_slice(&u64::from(m.sequence).to_be_bytes());
                self.emit(emit);
            }
            _ => self.stats.skipped += 1,
        }
    }

    /// Ends the session: System Event `C` (end of messages), stamped `ts_event_ns`.
    pub fn finish(&mut self, ts_event_ns: u64, emit: &mut impl FnMut(&[u8])) {
        let ts = self.timestamp(ts_event_ns);
        self.system_event(ts, b'C', emit);
    }

    /// Brings the ITCH order to the DBN size `o.dbn_size` at `price`.
    fn reconcile(&mut self, locate: u16, ts: u64, o: &mut ItchOrder, price: u32, emit: &mut impl FnMut(&[u8])) {
        let want = o.dbn_size;
        if o.shares == 0 {
            o.price = price;
            return self.add(locate, ts, o, want, emit);
        }
        if price == o.price && want <= o.shares {
            if want < o.shares {
                self.start(b'X', locate, ts);
                self.msg.extend_from_slice(&o.reference.to_be_bytes());
                self.msg.extend_from_slice(&(o.shares - want).to_be_bytes());
                self.emit(emit);
                o.shares = want;
            }
            return;
        }
        let new_reference = self.take_reference();
        self.start(b'U', locate, ts);
        self.msg.extend_from_slice(&o.reference.to_be_bytes());
        self.msg.extend_from_slice(&new_reference.to_be_bytes());
        self.msg.extend_from_slice(&want.to_be_bytes());
        self.msg.extend_from_slice(&price.to_be_bytes());
        self.emit(emit);
        o.reference = new_reference;
        o.shares = want;
        o.price = price;
    }

    fn take_reference(&mut self) -> u64 {
        let r = self.next_reference;
        self.next_reference += 1;
        r
    }

    /// An `A` for `shares` at `o.price` with a new reference.
    fn add(&mut self, locate: u16, ts: u64, o: &mut ItchOrder, shares: u32, emit: &mut impl FnMut(&[u8])) {
        o.reference = self.take_reference();
        o.shares = shares;
        let stock = self.stock_of_locate(locate);
        self.start(b'A', locate, ts);
        self.msg.extend_from_slice(&o.reference.to_be_bytes());
        self.msg.push(o.buy_sell);
        self.msg.extend_from_slice(&shares.to_be_bytes());
        self.msg.extend_from_slice(&stock);
        self.msg.extend_from_slice(&o.price.to_be_bytes());
        self.emit(emit);
    }

    /// A `D` if ITCH still holds the order.
    fn delete(&mut self, locate: u16, ts: u64, o: &ItchOrder, emit: &mut impl FnMut(&[u8])) {
        if o.shares == 0 {
            return;
        }
        self.start(b'D', locate, ts);
        self.msg.extend_from_slice(&o.reference.to_be_bytes());
        self.emit(emit);
    }

    fn system_event(&mut self, ts: u64, code: u8, emit: &mut impl FnMut(&[u8])) {
        self.start(b'S', 0, ts);
        self.msg.push(code);
        self.emit(emit);
    }

    /// Gives `id` the next locate and writes its Stock Directory; `None` past 65,535 locates.
    fn directory(&mut self, id: u32, symbol: &str, ts: u64, emit: &mut impl FnMut(&[u8])) -> Option<u16> {
        let locate = u16::try_from(self.locates.len() + 1).ok()?;
        self.locates.insert(id, locate);
        let stock = self.stock_bytes(symbol);
        self.stocks.push(stock);
        self.start(b'R', locate, ts);
        self.msg.extend_from_slice(&stock);
        // Market category, financial status, round lot size, round lots only, issue classification, issue
        // sub-type, authenticity, short sale threshold, IPO flag, LULD tier, ETP flag, leverage, inverse:
        // "not available" codes (space, or 0 for the numbers), authenticity `P` (live), round lot 1.
        self.msg.extend_from_slice(b"  ");
        self.msg.extend_from_slice(&1u32.to_be_bytes());
        self.msg.extend_from_slice(b"N   P    ");
        self.msg.extend_from_slice(&0u32.to_be_bytes());
        self.msg.push(b'N');
        self.emit(emit);
        Some(locate)
    }

    fn stock_bytes(&mut self, symbol: &str) -> [u8; 8] {
        let mut s = [b' '; 8];
        let printable: Vec<u8> = symbol.bytes().map(|c| if (0x20..0x7f).contains(&c) { c } else { b'?' }).collect();
        if printable.len() > 8 {
            self.stats.symbols_cut += 1;
        }
        for (d, c) in s.iter_mut().zip(printable) {
            *d = c;
        }
        s
    }

    fn stock_of_locate(&self, locate: u16) -> [u8; 8] {
        self.stocks.get(usize::from(locate)).copied().unwrap_or([b' '; 8])
    }

    fn timestamp(&mut self, ts_event_ns: u64) -> u64 {
        match ts_event_ns.checked_sub(self.midnight_ns) {
            Some(t) if t < DAY_NS => t,
            Some(_) => {
                self.stats.ts_clamped += 1;
                DAY_NS - 1
            }
            None => {
                self.stats.ts_clamped += 1;
                0
            }
        }
    }

    /// Starts a message: type, stock locate, tracking number 0, 6-byte timestamp.
    fn start(&mut self, msg_type: u8, locate: u16, ts: u64) {
        self.msg.clear();
        self.msg.push(msg_type);
        self.msg.extend_from_slice(&locate.to_be_bytes());
        self.msg.extend_from_slice(&0u16.to_be_bytes());
        self.msg.extend_from_slice(&ts.to_be_bytes()[2..]);
    }

    fn emit(&mut self, emit: &mut impl FnMut(&[u8])) {
        *self.stats.by_type.entry(self.msg[0]).or_insert(0) += 1;
        emit(&self.msg);
    }
}

fn buy_sell(side: u8) -> Option<u8> {
    match side {
        b'B' => Some(b'B'),
        b'A' => Some(b'S'),
        _ => None,
    }
}

/// A DBN price (1e-9 units) as an ITCH price (u32, 4 decimals), if it is one exactly.
pub fn price4(price_e9: i64) -> Option<u32> {
    if price_e9 % E9_PER_PRICE4 != 0 {
        return None;
    }
    u32::try_from(price_e9 / E9_PER_PRICE4).ok()
}
