//! NIC completion timestamps: the pure converter lives in [`crate::nic_clock`] (no `verbs` feature needed, so the
//! subscriber's histograms and their tests use it on any build); re-exported here where the provider uses it.
pub use crate::nic_clock::*;
