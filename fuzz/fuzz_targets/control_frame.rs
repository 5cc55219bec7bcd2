//! Control-plane frames from an untrusted peer: `read_msg` (length prefix + JSON envelope) and `decode_body`
//! (the envelope alone) must return an error, never panic, for any bytes. Whatever decodes must survive a
//! round trip: `encode` it again and it decodes to an equal message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mdfan_wire::control::{self, ControlMsg, MAX_FRAME_BYTES};

fn round_trip(msg: &ControlMsg) {
    let frame = control::encode(msg);
    assert!(frame.len() >= 4, "a frame has a 4-byte length prefix");
    let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    assert_eq!(len, frame.len() - 4, "length prefix must match the body");
    match control::decode_body(&frame[4..]) {
        Ok(again) => assert_eq!(&again, msg, "decode_body(encode(msg)) != msg"),
        Err(e) => panic!("encode produced a body decode_body refuses: {e}; msg {msg:?}"),
    }
    // read_msg refuses bodies over the limit by design; re-encoding can add defaulted fields
    // (`"instruments":null`, `"policy"`, `"snapshot"`), so only frames within it go through read_msg.
    if len <= MAX_FRAME_BYTES as usize {
        match control::read_msg(&mut &frame[..]) {
            Ok(again) => assert_eq!(&again, msg, "read_msg(encode(msg)) != msg"),
            Err(e) => panic!("encode produced a frame read_msg refuses: {e}; msg {msg:?}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // As a whole frame off the socket (length prefix first)...
    if let Ok(msg) = control::read_msg(&mut &data[..]) {
        round_trip(&msg);
    }
    // ...and as a frame body.
    if let Ok(msg) = control::decode_body(data) {
        round_trip(&msg);
    }
});
