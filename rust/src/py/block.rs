//! `Block`: the read-only view of one block version.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::block::Block as CoreBlock;

// ---- Block ---------------------------------------------------------------------

/// Read-only view of one block as it was when fetched (access_count is live).
#[pyclass(frozen, module = "rampart._core", name = "Block")]
pub struct PyBlock(pub(super) Arc<CoreBlock>, pub(super) Option<u64>);

#[pymethods]
impl PyBlock {
    #[getter]
    fn runtime_id(&self) -> String {
        self.0.id.to_hyphenated()
    }
    #[getter]
    fn semantic_name(&self) -> &str {
        self.0.name()
    }
    #[getter]
    fn content(&self) -> &str {
        self.0.content()
    }
    #[getter]
    fn priority(&self) -> f64 {
        self.0.priority
    }
    #[getter]
    fn source(&self) -> &'static str {
        self.0.source.as_str()
    }
    #[getter]
    fn author_id(&self) -> String {
        self.0.author.to_hyphenated()
    }
    #[getter]
    fn evictable(&self) -> bool {
        self.0.evictable
    }
    #[getter]
    fn trajectory_id(&self) -> Option<&str> {
        self.0.trajectory()
    }
    #[getter]
    fn created_at(&self) -> u32 {
        self.0.created_at
    }
    #[getter]
    fn access_count(&self) -> u64 {
        self.1.unwrap_or_else(|| self.0.access_count())
    }
    #[getter]
    fn tags(&self) -> Vec<&str> {
        self.0.tags().collect()
    }
    #[getter]
    fn token_count(&self) -> u32 {
        self.0.token_count()
    }
    #[getter]
    fn wrap_tokens(&self) -> u32 {
        self.0.wrap_tokens
    }
    #[getter]
    fn wrap_prefix(&self) -> &str {
        self.0.wrap().map(|w| &*w.prefix).unwrap_or("")
    }
    #[getter]
    fn wrap_suffix(&self) -> &str {
        self.0.wrap().map(|w| &*w.suffix).unwrap_or("")
    }
    #[getter]
    fn metadata_json(&self) -> Option<&str> {
        self.0.meta()
    }
    #[getter]
    fn embedded(&self) -> bool {
        self.0.row().is_some()
    }
    #[getter]
    fn truncated(&self) -> bool {
        self.0.truncated()
    }
    #[getter]
    fn gated(&self) -> bool {
        self.0.gated
    }
    #[getter]
    fn tool(&self) -> bool {
        self.0.tool
    }
}
