//! Shared by the feedsim tests.
pub mod itch_book;
