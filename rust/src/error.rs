//! The core's error type. `py/mod.rs` maps each variant to one Python exception class
//! of `rampart.errors` (which also subclasses the matching builtin), so the
//! messages are written here once, naming the block, its id and the registry.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// One or more runtime ids (or names) that the registry does not hold.
    BlockNotFound {
        registry: String,
        missing: Vec<String>,
    },
    /// A caller argument outside its domain (priority out of [0, 1], duplicates…).
    InvalidArgument(String),
    /// Content replacement attempted on a seed block.
    SeedMutation {
        registry: String,
        name: String,
        id: String,
    },
    /// Content replacement attempted on an orchestrator block.
    OrchestratorMutation {
        registry: String,
        name: String,
        id: String,
    },
    /// Eviction of a non-evictable block without `force`.
    Eviction {
        registry: String,
        name: String,
        id: String,
        author: String,
    },
    /// The acting registry is not the block's author.
    Permission(String),
    /// A saved registry file that cannot be read (truncated, damaged, newer).
    Corrupt(String),
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::BlockNotFound { registry, missing } => {
                if missing.len() == 1 {
                    write!(f, "registry '{registry}' has no block {}", missing[0])
                } else {
                    write!(
                        f,
                        "registry '{registry}' has no blocks {}",
                        missing.join(", ")
                    )
                }
            }
            CoreError::InvalidArgument(msg) => f.write_str(msg),
            CoreError::SeedMutation { registry, name, id } => write!(
                f,
                "block '{name}' ({id}) in registry '{registry}' is a seed block: its content \
                 is immutable (priority and wrap may change)"
            ),
            CoreError::OrchestratorMutation { registry, name, id } => write!(
                f,
                "block '{name}' ({id}) in registry '{registry}' is an orchestrator block: its \
                 content is immutable (priority and wrap may change)"
            ),
            CoreError::Eviction {
                registry,
                name,
                id,
                author,
            } => write!(
                f,
                "block '{name}' ({id}) in registry '{registry}' is not evictable; only its \
                 author, registry '{author}', may remove it with force=True"
            ),
            CoreError::Permission(msg) => f.write_str(msg),
            CoreError::Corrupt(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for CoreError {}

pub type Result<T> = std::result::Result<T, CoreError>;
