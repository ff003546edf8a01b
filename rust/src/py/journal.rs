//! The one write path of the binding: `run` takes a write method's `Op` and
//! either applies it (a local registry: no encoding) or returns the encoded
//! entry as a value, a `PendingEntry`, unapplied (a shared registry). The
//! binding does no I/O and never calls back into Python: the façade's driver
//! (sync or async, `rampart/_ops.py`) appends the entry to the store and has
//! the replica apply the journal up to it (`rampart/_replica.py`). Either way
//! the core applies the same value through `Registry::apply*`, and the outcome
//! becomes the same Python value. Also here: what a replica needs besides
//! (apply an entry, the entries that publish access counts and vectors).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use super::registry::PyRegistry;
use super::{detach_if, floats, to_pyerr, IntoPy, PyBlock};
use crate::block::BlockId;
use crate::error::CoreError;
use crate::journal::{decode_entry, encode_entry, stamp, Op, Outcome};
use crate::registry::text_hash;
use crate::tokens::count_cl100k;

fn origin_id(py: Python<'_>, raw: &[u8]) -> PyResult<BlockId> {
    raw.try_into().map(BlockId).map_err(|_| {
        to_pyerr(
            py,
            CoreError::InvalidArgument("a replica origin is 16 bytes".into()),
        )
    })
}

/// What the local call returns: `None`, a runtime id (one written block), a
/// list of ids, an index or count (`int`), or the evicted block.
fn outcome<'py>(py: Python<'py>, out: Outcome) -> PyResult<Bound<'py, PyAny>> {
    Ok(match out {
        Outcome::Nothing => py.None().into_bound(py),
        // The id straight into a Python str: the hot path of coordination.
        Outcome::Id(id) => PyString::new(py, id.encode_hyphenated(&mut [0; 36])).into_any(),
        Outcome::Ids(ids) => {
            PyList::new(py, ids.into_iter().map(BlockId::to_hyphenated))?.into_any()
        }
        Outcome::Index(n) | Outcome::Count(n) => n.into_pyobject(py)?.into_any(),
        Outcome::Evicted(b) => Bound::new(py, PyBlock(Arc::clone(&b), None))?.into_any(),
    })
}

/// Decide, before encoding, what replay must not decide: new blocks' ids and
/// creation times, and the token counts of a batch (so replicas do not each
/// count a large seed set). Returns whether the op writes text (the replica
/// then embeds what was written, off the write path).
fn prepare(op: &mut Op) -> bool {
    match op {
        Op::Insert {
            position, blocks, ..
        } => {
            stamp(blocks);
            if position.is_none() {
                for nb in blocks.iter_mut() {
                    if nb.token_count.is_none() {
                        nb.token_count = Some(count_cl100k(&nb.content));
                    }
                }
            }
            true
        }
        Op::UpdateContent { .. } | Op::Restore { .. } => true,
        _ => false,
    }
}

/// A shared registry's write, encoded and not yet applied: the façade appends
/// `data` to the store and applies the journal up to it. A value, not an
/// exception, so no frame between the core and the driver can swallow or
/// reorder it (the sans-IO shape of h11/httpcore).
#[pyclass(frozen, module = "rampart._core", name = "PendingEntry")]
pub struct PyPendingEntry {
    /// The encoded journal entry.
    #[pyo3(get)]
    data: Py<PyBytes>,
    /// Whether the op writes text (the replica then embeds what was written,
    /// off the write path).
    #[pyo3(get)]
    writes_text: bool,
}

#[pymethods]
impl PyPendingEntry {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "PendingEntry({} bytes, writes_text={})",
            self.data.bind(py).as_bytes().len(),
            self.writes_text
        )
    }
}

impl PyRegistry {
    pub(super) fn set_journal(&self, py: Python<'_>, origin: Option<&[u8]>) -> PyResult<()> {
        let origin = origin.map(|o| origin_id(py, o)).transpose()?;
        let on = origin.is_some();
        *self.journal.lock() = origin;
        self.journaled.store(on, Ordering::Release);
        Ok(())
    }

    /// Apply `op` here, or encode it as a `PendingEntry` when this registry is
    /// shared (under the replica's origin). `heavy`: release the GIL while
    /// applying or encoding.
    ///
    /// Measured against the two-path binding it replaced (five alternated runs,
    /// thread CPU time, min, loaded 2-core machine): a local write pays the op
    /// value and this dispatch, `write_block` 1.36 -> 1.42 µs (+4 %, the new
    /// `gated` argument included), `update_priority` 0.62 -> 0.66 µs (+6 %),
    /// `promote` 1.70 -> 1.78 µs (+5 %); a default `evict_by_policy` on 10 000
    /// blocks, now scored before the lock and applied by id, 1.02 -> 1.19 ms.
    pub(super) fn run<'py>(
        &self,
        py: Python<'py>,
        mut op: Op,
        heavy: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        if self.journaled.load(Ordering::Acquire) {
            let origin = *self.journal.lock();
            if let Some(origin) = origin {
                let (data, writes_text) = detach_if(py, heavy, || {
                    let writes_text = prepare(&mut op);
                    (encode_entry(origin, &op), writes_text)
                });
                let pending = PyPendingEntry {
                    data: PyBytes::new(py, &data).unbind(),
                    writes_text,
                };
                return Ok(Bound::new(py, pending)?.into_any());
            }
        }
        let out = detach_if(py, heavy, || self.core.apply_local(op)).py_err(py)?;
        outcome(py, out)
    }

    /// Apply one journal entry through the core; a garbage entry raises
    /// `RegistryFileError`, a refused operation the usual typed error — the
    /// same in every replica.
    pub(super) fn apply_journal_entry<'py>(
        &self,
        py: Python<'py>,
        entry: &[u8],
        me: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        let me = origin_id(py, me)?;
        let heavy = entry.len() > 1 << 16;
        let out = detach_if(py, heavy, || {
            decode_entry(entry).and_then(|(origin, op)| self.core.apply(origin, op, me))
        })
        .py_err(py)?;
        outcome(py, out)
    }

    pub(super) fn encode_access<'py>(
        &self,
        py: Python<'py>,
        origin: &[u8],
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let origin = origin_id(py, origin)?;
        let deltas = self.core.take_access_deltas();
        if deltas.is_empty() {
            return Ok(None);
        }
        let entry = encode_entry(origin, &Op::Access { deltas });
        Ok(Some(PyBytes::new(py, &entry)))
    }

    pub(super) fn encode_embed<'py>(
        &self,
        py: Python<'py>,
        origin: &[u8],
        blocks: &[PyRef<'py, PyBlock>],
        matrix: &[u8],
        dim: usize,
        truncated: Vec<bool>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let origin = origin_id(py, origin)?;
        let values = floats(py, matrix, "embedding matrix")?;
        if dim == 0 || values.len() != blocks.len() * dim || truncated.len() != blocks.len() {
            return Err(to_pyerr(
                py,
                CoreError::InvalidArgument("embedding matrix does not match its blocks".into()),
            ));
        }
        let items = blocks
            .iter()
            .zip(values.chunks_exact(dim))
            .zip(&truncated)
            .map(|((b, v), &t)| (b.0.id, text_hash(&b.0), t, v.to_vec()))
            .collect();
        let entry = encode_entry(origin, &Op::Embed { items });
        Ok(PyBytes::new(py, &entry))
    }
}
