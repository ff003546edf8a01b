//! rampart's Rust core: the ordered block registry, the token-budget compile and
//! the built-in `cl100k_base` token counter.
//!
//! Everything here is plain Rust (no pyo3) so `cargo test` and `cargo clippy` run
//! without Python; the `py` module (`rust/src/py/`, one file per Python class, the
//! error mapping in `py/mod.rs`) is the one place that binds it to the
//! `rampart._core` extension module.

pub mod block;
pub mod compile;
pub mod embeddings;
pub mod error;
pub mod journal;
pub mod lexical;
pub mod persist;
pub mod registry;
pub mod tokens;
pub mod unicode_tables;

#[cfg(feature = "python")]
mod py;

pub use block::{Block, BlockId, NewBlock, Source, Wrap};
pub use compile::{Exclusion, Gate, Selection};
pub use error::CoreError;
pub use registry::{Registry, Snapshot};
