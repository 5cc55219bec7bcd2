//! The ring conformance suite: what every fabric provider promises through [`LocalRing`] and [`RemoteRing`]
//! (the contract in the crate docs), checked through the provider-agnostic layer the product uses
//! (`PreparedLocalRing::create`, `AnySender::open`/`attach`, `connect`), so a new provider passes the same tests
//! by adding its arm there.
//!
//! Runs on shared memory in every `cargo test`, and on RDMA verbs inside the Soft-RoCE VM (`ops/softroce/run-e2e`)
//! with `MDFAN_TEST_FABRIC=verbs` (device `MDFAN_TEST_DEVICE`, default rxe0; GID index `MDFAN_TEST_GID_INDEX`,
//! default 1), built with `--features verbs`.
//!
//! Shared-memory-only behaviour (CQ laps, torn slots, a writer racing the reader's close) is in the subscriber
//! crate's `ring_stress` and `ring_model` tests.

use std::time::{Duration, Instant};

use mdfan_fabric::wire::ring::{imm_from_seq, seq_from_imm, slot_index};
use mdfan_fabric::wire::{BookUpdate, Kind};
use mdfan_fabric::{
    AnyLocalRing, AnyRemoteRing, AnySender, CloseReason, FabricConfig, LocalRing, PeerState, PostError,
    PreparedLocalRing, Provider, RemoteRing,
};

/// How long any one expected event may take (the VM runs under software emulation).
const DEADLINE: Duration = Duration::from_secs(10);

fn provider() -> Provider {
    match std::env::var("MDFAN_TEST_FABRIC").as_deref() {
        Ok("verbs") => Provider::Verbs,
        _ => Provider::Shm,
    }
}

fn config() -> FabricConfig {
    match provider() {
        Provider::Shm => FabricConfig::default(),
        Provider::Verbs => verbs_config(),
    }
}

#[cfg(feature = "verbs")]
fn verbs_config() -> FabricConfig {
    let gid_index = std::env::var("MDFAN_TEST_GID_INDEX").ok().map(|g| g.parse().expect("MDFAN_TEST_GID_INDEX"));
    FabricConfig::Verbs(mdfan_fabric::verbs::VerbsConfig {
        device: Some(std::env::var("MDFAN_TEST_DEVICE").unwrap_or_else(|_| "rxe0".into())),
        gid_index: Some(gid_index.unwrap_or(1)),
        ..Default::default()
    })
}

#[cfg(not(feature = "verbs"))]
fn verbs_config() -> FabricConfig {
    panic!("MDFAN_TEST_FABRIC=verbs needs this test built with --features verbs");
}

/// A connected ring of `slots` slots: created and granted by the receiver, attached by a sender opened for it,
/// connected with the sender's accept, and ready (verbs: the receiver's first credit has landed).
fn pair(slots: u32) -> (AnyLocalRing, AnyRemoteRing, AnySender) {
    let cfg = config();
    let sender = AnySender::open(&cfg).expect("the sender opens");
    let (mut prepared, grant) = PreparedLocalRing::create(&cfg, slots).expect("the ring is created");
    let (remote, accept) =
        sender.attach(&grant, mdfan_fabric::Peer::this_user()).expect("the sender attaches the grant");
    prepared.unlink();
    let mut local = prepared.connect(&accept).expect("the ring connects");
    let start = Instant::now();
    while !remote.ready() {
        assert!(local.poll_cq().is_none(), "a completion before any write");
        assert!(start.elapsed() < DEADLINE, "the receiver's side never became ready");
    }
    (local, remote, sender)
}

/// The record written as `seq`: its fields derived from `seq`, so a reader can tell it is whole and its own.
fn record(seq: u64) -> BookUpdate {
    BookUpdate {
        seq,
        order_id: seq * 7,
        price_e9: seq as i64 * 1_000_000_000,
        size: seq as u32,
        ..BookUpdate::control(Kind::Add)
    }
}

/// Writes `seq` into its slot (flushing when the send queue is full).
fn write(remote: &mut AnyRemoteRing, seq: u64) {
    let slots = remote.slot_count();
    loop {
        match remote.write_with_imm(slot_index(seq, slots), &record(seq), imm_from_seq(seq)) {
            Ok(()) => return,
            Err(PostError::SendQueueFull) => remote.flush().expect("flush"),
            Err(e) => panic!("writing seq {seq}: {e}"),
        }
    }
}

/// Polls (as the subscriber does, expecting `expected`) until a completion comes; checks its slot holds the
/// record of the seq it names, and returns that seq.
fn reap(local: &mut AnyLocalRing, expected: u64) -> u64 {
    let start = Instant::now();
    loop {
        if let Some(c) = local.poll_cq_expecting(expected) {
            let seq = seq_from_imm(c.imm_data, expected);
            assert_eq!(c.seq(), seq, "the ring rebuilt another seq from imm_data {:#x}", c.imm_data);
            assert_eq!(c.record(), Some(&record(seq)), "the slot of seq {seq} holds another record");
            return seq;
        }
        assert!(start.elapsed() < DEADLINE, "no completion while expecting seq {expected}");
    }
}

/// Polls an empty ring until the sender's view of the consumed seq is `want` (verbs credits travel by RDMA
/// WRITE, at the latest after an idle stretch of polls).
fn wait_consumed(local: &mut AnyLocalRing, remote: &mut AnyRemoteRing, want: u64) {
    let start = Instant::now();
    while remote.consumed_seq() != want {
        assert!(local.poll_cq().is_none(), "a completion nobody wrote");
        assert!(start.elapsed() < DEADLINE, "the sender saw consumed {}, not {want}", remote.consumed_seq());
    }
}

#[test]
fn writes_arrive_in_order_each_with_its_record_whole() {
    let (mut local, mut remote, _sender) = pair(64);
    for seq in 1..=40 {
        write(&mut remote, seq);
    }
    remote.flush().unwrap();
    for expected in 1..=40 {
        assert_eq!(reap(&mut local, expected), expected);
        local.release(expected);
    }
    assert_eq!(local.peer_state(), PeerState::Attached);
}

#[test]
fn a_ring_wraps_many_times_under_flow_control() {
    const SLOTS: u32 = 64;
    const TOTAL: u64 = SLOTS as u64 * 20 + 13;
    let (mut local, mut remote, _sender) = pair(SLOTS);
    let (mut next_write, mut next_read) = (1u64, 1u64);
    let start = Instant::now();
    while next_read <= TOTAL {
        // the writer fills what the reader has released, as the publisher's flow control does
        let consumed = remote.consumed_seq();
        assert!(consumed < next_write, "consumed {consumed} is ahead of what was written ({})", next_write - 1);
        while next_write <= TOTAL && next_write <= consumed + SLOTS as u64 {
            write(&mut remote, next_write);
            next_write += 1;
        }
        remote.flush().unwrap();
        // the reader takes what is there, releasing as it goes
        while let Some(c) = local.poll_cq_expecting(next_read) {
            let seq = seq_from_imm(c.imm_data, next_read);
            assert_eq!((seq, c.seq()), (next_read, next_read), "out of order");
            assert_eq!(c.record(), Some(&record(seq)), "seq {seq} after a wrap");
            local.release(seq);
            next_read += 1;
        }
        assert!(start.elapsed() < 3 * DEADLINE, "stuck at read {next_read}, write {next_write}");
    }
    wait_consumed(&mut local, &mut remote, TOTAL);
}

#[test]
fn a_skipped_seq_shows_as_a_jump_to_the_next_written_one() {
    // The publisher under `resync` skips seqs it has no room for; the reader must get the next written one.
    let (mut local, mut remote, _sender) = pair(64);
    for seq in [1, 2, 5] {
        write(&mut remote, seq);
    }
    remote.flush().unwrap();
    assert_eq!(reap(&mut local, 1), 1);
    assert_eq!(reap(&mut local, 2), 2);
    assert_eq!(reap(&mut local, 3), 5, "expecting 3, the reader gets 5");
    local.release(5);
    wait_consumed(&mut local, &mut remote, 5);
}

#[test]
fn what_the_reader_releases_reaches_the_writer_and_nothing_more() {
    let (mut local, mut remote, _sender) = pair(64);
    assert_eq!(remote.consumed_seq(), 0);
    for seq in 1..=10 {
        write(&mut remote, seq);
    }
    remote.flush().unwrap();
    for expected in 1..=10 {
        reap(&mut local, expected);
    }
    // read but not released: the writer must not see them consumed
    for _ in 0..4096 {
        assert!(local.poll_cq().is_none());
    }
    assert_eq!(remote.consumed_seq(), 0, "records read but not released are not consumed");
    local.release(6);
    wait_consumed(&mut local, &mut remote, 6);
    local.release(10);
    wait_consumed(&mut local, &mut remote, 10);
}

#[test]
fn a_release_never_passes_the_last_completion_nor_goes_back() {
    let (mut local, mut remote, _sender) = pair(64);
    for seq in 1..=5 {
        write(&mut remote, seq);
    }
    remote.flush().unwrap();
    for expected in 1..=5 {
        reap(&mut local, expected);
    }
    // a release past what was completed would let the writer reuse slots of seqs not yet written or read
    local.release(1_000);
    wait_consumed(&mut local, &mut remote, 5);
    local.release(3);
    assert_eq!(remote.consumed_seq(), 5, "a smaller release is ignored");
    for seq in 6..=8 {
        write(&mut remote, seq);
    }
    remote.flush().unwrap();
    for expected in 6..=8 {
        reap(&mut local, expected);
    }
    local.release(8);
    wait_consumed(&mut local, &mut remote, 8);
}

#[test]
fn writes_before_a_close_are_delivered() {
    let (mut local, mut remote, _sender) = pair(64);
    for seq in 1..=5 {
        write(&mut remote, seq);
    }
    remote.close(CloseReason::EndOfStream);
    for expected in 1..=5 {
        assert_eq!(reap(&mut local, expected), expected);
    }
    // Shared memory carries the reason in the ring's header; on verbs the ring cannot (the publisher's Bye on
    // the control connection does), and the QP stays up for what was posted.
    let want = match provider() {
        Provider::Shm => PeerState::Closed(CloseReason::EndOfStream),
        Provider::Verbs => PeerState::Attached,
    };
    assert_eq!(local.peer_state(), want);
}

#[test]
fn a_slot_outside_the_ring_is_refused_and_nothing_is_delivered() {
    let (mut local, mut remote, _sender) = pair(64);
    let err = remote.write_with_imm(64, &record(1), imm_from_seq(1)).unwrap_err();
    assert_eq!(err, PostError::SlotOutOfRange { slot: 64, slot_count: 64 });
    remote.flush().unwrap();
    write(&mut remote, 1);
    remote.flush().unwrap();
    assert_eq!(reap(&mut local, 1), 1);
    for _ in 0..4096 {
        assert!(local.poll_cq().is_none(), "only the one valid write arrives");
    }
}

/// Entitlement on verbs: the publisher gives each subscriber its own PD, QP and credit MR, so a subscriber that
/// writes its credits with another subscriber's rkey and address (here B, with A's, through B's own QP) is refused
/// by the NIC (remote access error): only B's QP fails; A's records and credits go on untouched. On shared memory
/// the same boundary is the file system's: each ring is a 0600 file of its subscriber (nothing to test here).
#[test]
fn credits_written_with_another_subscribers_rkey_fail_that_subscriber_alone() {
    if provider() != Provider::Verbs {
        return;
    }
    use mdfan_fabric::wire::control::AcceptFabric;
    let cfg = config();
    let sender = AnySender::open(&cfg).expect("the sender opens");
    let (mut prep_a, grant_a) = PreparedLocalRing::create(&cfg, 64).expect("ring A");
    let (mut prep_b, grant_b) = PreparedLocalRing::create(&cfg, 64).expect("ring B");
    let (mut remote_a, accept_a) = sender.attach(&grant_a, mdfan_fabric::Peer::this_user()).expect("attach A");
    let (remote_b, accept_b) = sender.attach(&grant_b, mdfan_fabric::Peer::this_user()).expect("attach B");
    let forged = match (&accept_a, &accept_b) {
        (AcceptFabric::Verbs { credit_addr, credit_rkey, .. }, AcceptFabric::Verbs { endpoint, .. }) => {
            AcceptFabric::Verbs { endpoint: endpoint.clone(), credit_addr: *credit_addr, credit_rkey: *credit_rkey }
        }
        _ => unreachable!("verbs accepts"),
    };
    prep_a.unlink();
    prep_b.unlink();
    let mut local_a = prep_a.connect(&accept_a).expect("A connects");
    let mut local_b = prep_b.connect(&forged).expect("B connects its QP (the forged credit target is only used later)");
    // B's first credit write goes to A's word with A's rkey: the NIC refuses it and B's QP fails.
    let start = Instant::now();
    while local_b.peer_state() != PeerState::Closed(CloseReason::FabricError) {
        assert!(local_b.poll_cq().is_none(), "B got a completion");
        assert!(start.elapsed() < DEADLINE, "B's forged credit write was not refused: {:?}", local_b.peer_state());
    }
    assert!(!remote_b.ready(), "B's own credit never landed");
    // A is untouched: its stream and its credits go on, and its credit word holds only what A wrote.
    let start = Instant::now();
    while !remote_a.ready() {
        assert!(local_a.poll_cq().is_none(), "a completion before any write");
        assert!(start.elapsed() < DEADLINE, "A's side never became ready");
    }
    for seq in 1..=200 {
        // room in A's 64 slots, by A's own credits
        let start = Instant::now();
        while remote_a.consumed_seq() + 64 < seq {
            assert!(local_a.poll_cq().is_none(), "a completion nobody wrote");
            assert!(start.elapsed() < DEADLINE, "A's credits stopped at {}", remote_a.consumed_seq());
        }
        write(&mut remote_a, seq);
        remote_a.flush().expect("flush");
        assert_eq!(reap(&mut local_a, seq), seq);
        local_a.release(seq);
    }
    wait_consumed(&mut local_a, &mut remote_a, 200);
    assert_eq!(local_a.peer_state(), PeerState::Attached);
    assert_eq!(remote_a.failure(), None);
}
