//! Exchange input, normalised into [`BookUpdate`](crate::BookUpdate) records.
//!
//! - [`dbn`]: Databento Binary Encoding, MBO schema (CME Globex MDP 3.0 via `GLBX.MDP3`).

pub mod dbn;
