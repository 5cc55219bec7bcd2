//! Names for the codes in [`crate::PostError::Transport`] from the verbs provider.
//!
//! - `code > 0`: an `enum ibv_wc_status` from an error WC (`ibv_poll_cq(3)`, "WORK COMPLETION STATUS").
//! - `code < 0`: minus an errno: from `ibv_post_send`/`ibv_post_recv` (ENOMEM = queue full, EINVAL), from polling
//!   the CQ, or [`CLOSED`] after [`crate::RemoteRing::close`].
#![forbid(unsafe_code)]

/// The code of a write on a ring that was closed (`-ESHUTDOWN`).
pub const CLOSED: i32 = -libc::ESHUTDOWN;

/// The `IBV_WC_*` name of a WC status (as `ibv_wc_status_str(3)` would describe it), `"IBV_WC_UNKNOWN"` for a
/// value libibverbs 44 does not define. Negative codes (errnos of post/poll calls) are named too.
pub fn wc_status_name(code: i32) -> &'static str {
    match code {
        0 => "IBV_WC_SUCCESS",
        1 => "IBV_WC_LOC_LEN_ERR",
        2 => "IBV_WC_LOC_QP_OP_ERR",
        3 => "IBV_WC_LOC_EEC_OP_ERR",
        4 => "IBV_WC_LOC_PROT_ERR",
        5 => "IBV_WC_WR_FLUSH_ERR",
        6 => "IBV_WC_MW_BIND_ERR",
        7 => "IBV_WC_BAD_RESP_ERR",
        8 => "IBV_WC_LOC_ACCESS_ERR",
        9 => "IBV_WC_REM_INV_REQ_ERR",
        10 => "IBV_WC_REM_ACCESS_ERR",
        11 => "IBV_WC_REM_OP_ERR",
        12 => "IBV_WC_RETRY_EXC_ERR",
        13 => "IBV_WC_RNR_RETRY_EXC_ERR",
        14 => "IBV_WC_LOC_RDD_VIOL_ERR",
        15 => "IBV_WC_REM_INV_RD_REQ_ERR",
        16 => "IBV_WC_REM_ABORT_ERR",
        17 => "IBV_WC_INV_EECN_ERR",
        18 => "IBV_WC_INV_EEC_STATE_ERR",
        19 => "IBV_WC_FATAL_ERR",
        20 => "IBV_WC_RESP_TIMEOUT_ERR",
        21 => "IBV_WC_GENERAL_ERR",
        22 => "IBV_WC_TM_ERR",
        23 => "IBV_WC_TM_RNDV_INCOMPLETE",
        c if c == CLOSED => "ring closed (ESHUTDOWN)",
        c if c == -libc::ENOMEM => "post failed: queue full (ENOMEM)",
        c if c == -libc::EINVAL => "post failed: invalid WR or QP state (EINVAL)",
        c if c == -libc::EFAULT => "post failed: bad address (EFAULT)",
        c if c < 0 => "post or poll failed (negative errno)",
        _ => "IBV_WC_UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_sys::ibv_wc_status as s;

    #[test]
    fn names_match_the_verbs_h_values() {
        let table = [
            (s::IBV_WC_SUCCESS, "IBV_WC_SUCCESS"),
            (s::IBV_WC_LOC_PROT_ERR, "IBV_WC_LOC_PROT_ERR"),
            (s::IBV_WC_WR_FLUSH_ERR, "IBV_WC_WR_FLUSH_ERR"),
            (s::IBV_WC_REM_ACCESS_ERR, "IBV_WC_REM_ACCESS_ERR"),
            (s::IBV_WC_RETRY_EXC_ERR, "IBV_WC_RETRY_EXC_ERR"),
            (s::IBV_WC_RNR_RETRY_EXC_ERR, "IBV_WC_RNR_RETRY_EXC_ERR"),
            (s::IBV_WC_FATAL_ERR, "IBV_WC_FATAL_ERR"),
            (s::IBV_WC_GENERAL_ERR, "IBV_WC_GENERAL_ERR"),
            (s::IBV_WC_TM_RNDV_INCOMPLETE, "IBV_WC_TM_RNDV_INCOMPLETE"),
        ];
        for (code, name) in table {
            assert_eq!(wc_status_name(code as i32), name);
        }
        assert_eq!(wc_status_name(24), "IBV_WC_UNKNOWN");
        assert_eq!(wc_status_name(CLOSED), "ring closed (ESHUTDOWN)");
        assert_eq!(wc_status_name(-libc::ENOMEM), "post failed: queue full (ENOMEM)");
        assert_eq!(wc_status_name(-9999), "post or poll failed (negative errno)");
    }

    #[test]
    fn every_defined_status_has_its_own_name() {
        let names: std::collections::HashSet<_> = (0..=23).map(wc_status_name).collect();
        assert_eq!(names.len(), 24);
        assert!(names.iter().all(|n| n.starts_with("IBV_WC_") && *n != "IBV_WC_UNKNOWN"));
    }
}
