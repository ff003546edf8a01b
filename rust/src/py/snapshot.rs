//! `Snapshot` (a registry's picture, for restore) and `SavedRegistry` (a file
//! or checkpoint decoded and checked, not yet installed).

use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use std::sync::Arc;

use super::{IntoPy, PyBlock};
use crate::block::BlockId;
use crate::persist::{self, SavedRegistry};
use crate::registry::Snapshot as CoreSnapshot;

// ---- Snapshot ------------------------------------------------------------------

#[pyclass(frozen, module = "rampart._core", name = "Snapshot")]
pub struct PySnapshot(pub(super) CoreSnapshot);

#[pymethods]
impl PySnapshot {
    fn __len__(&self) -> usize {
        self.0.order.len()
    }
    #[getter]
    fn taken_at(&self) -> u32 {
        self.0.taken_at
    }
    #[getter]
    fn registry_id(&self) -> String {
        self.0.registry.to_hyphenated()
    }
    /// The blocks as snapshotted, with the access counts recorded then.
    fn blocks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let snap = &self.0;
        let views = snap.order.iter().zip(&snap.access_counts);
        PyList::new(py, views.map(|(b, &n)| PyBlock(Arc::clone(b), Some(n))))
    }
}

/// A registry file decoded and checked, not yet in any registry.
#[pyclass(frozen, module = "rampart._core", name = "SavedRegistry")]
pub struct PySaved {
    /// Taken (once) by `Registry.install`; the ids when it came from a checkpoint.
    saved: Mutex<Option<(SavedRegistry, Option<Vec<BlockId>>)>>,
    label: String,
    blocks: usize,
    dim: usize,
    settings: String,
    registry_id: BlockId,
}

#[pymethods]
impl PySaved {
    /// Label of the registry that was saved.
    #[getter]
    fn label(&self) -> &str {
        &self.label
    }
    fn __len__(&self) -> usize {
        self.blocks
    }
    /// Embedding dimension (0: no vectors).
    #[getter]
    fn dim(&self) -> usize {
        self.dim
    }
    /// The settings JSON the binding saved.
    #[getter]
    fn settings(&self) -> &str {
        &self.settings
    }
    /// `(index, name, metadata JSON)` of every block that has metadata, read
    /// before anything is installed (the façade validates it: opaque to the core).
    fn block_metadata(&self) -> Vec<(usize, String, String)> {
        let guard = self.saved.lock();
        let Some((saved, _)) = guard.as_ref() else {
            return Vec::new();
        };
        saved
            .blocks
            .iter()
            .enumerate()
            .filter_map(|(k, b)| Some((k, b.block.name.clone(), b.block.meta.clone()?)))
            .collect()
    }
    /// Id of the registry that was saved.
    #[getter]
    fn registry_id(&self) -> String {
        self.registry_id.to_hyphenated()
    }
}

fn saved(saved: SavedRegistry, ids: Option<Vec<BlockId>>) -> PySaved {
    let (label, n, dim) = (saved.label.clone(), saved.blocks.len(), saved.dim);
    let (settings, id) = (saved.settings.clone(), saved.registry);
    PySaved {
        saved: Mutex::new(Some((saved, ids))),
        label,
        blocks: n,
        dim,
        settings,
        registry_id: id,
    }
}

impl PySaved {
    /// The decoded registry, once: installing consumes it.
    pub(super) fn take(&self, _py: Python<'_>) -> PyResult<(SavedRegistry, Option<Vec<BlockId>>)> {
        self.saved
            .lock()
            .take()
            .ok_or_else(|| PyValueError::new_err("this decoded file was already installed"))
    }
}

/// Decode and check a shared registry's checkpoint (`RegistryFileError` if bad);
/// installing it keeps the runtime ids.
#[pyfunction]
pub(super) fn decode_checkpoint(py: Python<'_>, data: &[u8]) -> PyResult<PySaved> {
    let (s, ids) = py
        .detach(|| crate::journal::decode_checkpoint(data))
        .py_err(py)?;
    Ok(saved(s, Some(ids)))
}

/// Decode and check a saved registry file's bytes (`RegistryFileError` if bad).
#[pyfunction]
pub(super) fn decode_registry(py: Python<'_>, data: &[u8]) -> PyResult<PySaved> {
    let s = py.detach(|| persist::decode(data)).py_err(py)?;
    Ok(saved(s, None))
}
