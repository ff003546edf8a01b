//! The binding of `rampart._core`: one file per Python class, each thin —
//! signatures stay primitive (ids as `str`, scores as `list[float]`); defaults,
//! argument checking and docs live in the Python façade. Every class is `frozen`
//! with the lock inside the core registry, so no "Already borrowed" under
//! threads. We never call into Python while a core lock is held (the core never
//! calls back), which is what keeps GIL + RwLock free of deadlock.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | shared helpers (per-block Python strings, error mapping, id and vector conversion), module functions, the module |
//! | `block.rs` | `Block` |
//! | `selection.rs` | `OrderView`, `Selection`, prompt rendering and the prompt memo |
//! | `snapshot.rs` | `Snapshot`, `SavedRegistry` |
//! | `registry.rs` | `Registry`: reads, one method per write operation, the one compile entry |
//! | `lexical.rs` | `Bm25Index`, `terms` (the lexical relevance scorer) |
//! | `journal.rs` | `run`, the one write path (local apply, or the encoded entry as a `PendingEntry`), and what replicas need |

use std::sync::{Arc, OnceLock};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyType};

use crate::block::{Attachment, Block as CoreBlock, BlockId, Source};
use crate::error::CoreError;
use crate::registry::Registry as CoreRegistry;
use crate::tokens::Encoding;

mod block;
mod journal;
mod lexical;
mod registry;
mod selection;
mod snapshot;

use block::PyBlock;
use registry::PyRegistry;
use selection::{PyOrderView, PySelection};
use snapshot::{PySaved, PySnapshot};

/// Registries above this size release the GIL for O(n) work; below it the
/// save/restore of the thread state (~100 ns) costs more than it frees.
pub(super) const DETACH_ABOVE: usize = 2048;

/// Prompts of up to this many blocks are joined from cached per-block Python
/// strings (one copy, no UTF-8 decoding: ~2× faster at the usual budgets). Larger
/// ones are rendered in Rust with the GIL released and decoded once, so an
/// unlimited compile of a huge registry does not keep a second copy of every
/// block's text alive in Python.
pub(super) const JOIN_AT_MOST: usize = 512;

// ---- per-block Python strings ----------------------------------------------------

/// The Python strings of one block, created on first use and kept in the core
/// block's attachment slot. A changed block is a new core block, so these can
/// never go stale.
#[derive(Default)]
struct PyTexts {
    name: OnceLock<Py<PyString>>,
    rendered: OnceLock<Py<PyString>>,
}

fn texts(b: &CoreBlock) -> &PyTexts {
    match b.attachment() {
        Some(a) => texts_of(a),
        None => texts_of(b.attach(Box::new(PyTexts::default()))),
    }
}

fn texts_of(a: &Attachment) -> &PyTexts {
    debug_assert!(a.is::<PyTexts>());
    // SAFETY: this file is the only code that attaches anything to a block, and
    // it only ever attaches a `PyTexts` (above), so the erased value is one.
    // (`downcast_ref` would check that with a virtual `type_id` call per block
    // on the compile path.)
    unsafe { &*(&**a as *const (dyn std::any::Any + Send + Sync) as *const PyTexts) }
}

/// `OnceLock::set` runs no Python code while it holds the cell, so two threads
/// racing here cannot deadlock on the GIL; the loser's string is dropped.
fn cached<'py>(
    py: Python<'py>,
    cell: &OnceLock<Py<PyString>>,
    make: impl FnOnce() -> Bound<'py, PyString>,
) -> Bound<'py, PyString> {
    if let Some(s) = cell.get() {
        return s.bind(py).clone();
    }
    let _ = cell.set(make().unbind());
    cell.get().expect("just set").bind(py).clone()
}

fn py_name<'py>(py: Python<'py>, b: &CoreBlock) -> Bound<'py, PyString> {
    cached(py, &texts(b).name, || PyString::new(py, b.name()))
}

fn py_rendered<'py>(py: Python<'py>, b: &CoreBlock) -> Bound<'py, PyString> {
    cached(py, &texts(b).rendered, || match b.wrap() {
        None => PyString::new(py, b.content()),
        Some(w) => PyString::new(py, &format!("{}{}{}", w.prefix, b.content(), w.suffix)),
    })
}

fn detach_if<T: Send>(py: Python<'_>, heavy: bool, f: impl FnOnce() -> T + Send) -> T {
    if heavy {
        py.detach(f)
    } else {
        f()
    }
}

fn error_class<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
) -> Bound<'py, PyType> {
    cell.import(py, "rampart.errors", name)
        .expect("rampart.errors defines every error class")
        .clone()
}

fn to_pyerr(py: Python<'_>, err: CoreError) -> PyErr {
    static NOT_FOUND: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static INVALID: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static SEED: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static ORCH: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static EVICT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static PERM: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static FILE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let msg = err.to_string();
    let cls = match err {
        CoreError::BlockNotFound { .. } => error_class(py, &NOT_FOUND, "BlockNotFoundError"),
        CoreError::InvalidArgument(_) => error_class(py, &INVALID, "InvalidArgumentError"),
        CoreError::SeedMutation { .. } => error_class(py, &SEED, "SeedMutationError"),
        CoreError::OrchestratorMutation { .. } => {
            error_class(py, &ORCH, "OrchestratorMutationError")
        }
        CoreError::Eviction { .. } => error_class(py, &EVICT, "EvictionError"),
        CoreError::Permission(_) => error_class(py, &PERM, "BlockPermissionError"),
        CoreError::Corrupt(_) => error_class(py, &FILE, "RegistryFileError"),
    };
    PyErr::from_type(cls, msg)
}

trait IntoPy<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, CoreError> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_pyerr(py, e))
    }
}

/// A runtime id string that is not a UUID names no block: `BlockNotFoundError`.
fn parse_id(py: Python<'_>, reg: &CoreRegistry, id: &str) -> PyResult<BlockId> {
    BlockId::parse(id).ok_or_else(|| {
        to_pyerr(
            py,
            CoreError::BlockNotFound {
                registry: reg.label().to_string(),
                missing: vec![id.to_string()],
            },
        )
    })
}

fn parse_ids(py: Python<'_>, reg: &CoreRegistry, ids: Vec<String>) -> PyResult<Vec<BlockId>> {
    ids.iter().map(|i| parse_id(py, reg, i)).collect()
}

fn parse_source(s: &str) -> PyResult<Source> {
    Source::parse(s).ok_or_else(|| {
        PyValueError::new_err(format!(
            "source must be 'seed', 'agent' or 'orchestrator', got {s:?}"
        ))
    })
}

/// float32 values from a native-endian byte string (numpy's `tobytes()`).
fn floats(py: Python<'_>, bytes: &[u8], what: &str) -> PyResult<Vec<f32>> {
    if bytes.len() % 4 != 0 {
        return Err(to_pyerr(
            py,
            CoreError::InvalidArgument(format!(
                "{what} is {} bytes long, not a whole number of float32 values",
                bytes.len()
            )),
        ));
    }
    let v: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if v.iter().any(|x| !x.is_finite()) {
        return Err(to_pyerr(
            py,
            CoreError::InvalidArgument(format!("{what} holds NaN or infinite values")),
        ));
    }
    Ok(v)
}

fn float_bytes<'py>(py: Python<'py>, v: &[f32]) -> Bound<'py, PyBytes> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_ne_bytes());
    }
    PyBytes::new(py, &out)
}

fn views(
    py: Python<'_>,
    blocks: impl Iterator<Item = Arc<CoreBlock>>,
) -> PyResult<Bound<'_, PyList>> {
    PyList::new(py, blocks.map(|b| PyBlock(b, None)))
}

/// The label this process knows for a registry id (None: unknown).
#[pyfunction]
fn label_of(registry_id: &str) -> Option<String> {
    BlockId::parse(registry_id).and_then(crate::registry::known_label)
}

/// The core encoding called `name`, or a ValueError naming the ones there are.
fn encoding(name: &str) -> PyResult<Encoding> {
    Encoding::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown encoding {name:?}: the built-in counter has 'cl100k_base' and 'o200k_base'"
        ))
    })
}

/// Tokens of `text` under `encoding` (exact, offline).
#[pyfunction]
#[pyo3(signature = (text, encoding="cl100k_base"))]
fn count_tokens(py: Python<'_>, text: &str, encoding: &str) -> PyResult<u32> {
    let enc = self::encoding(encoding)?;
    Ok(detach_if(py, text.len() > 1 << 16, || enc.count(text)))
}

/// Tokens of each text under `encoding`, with the GIL released.
#[pyfunction]
#[pyo3(signature = (texts, encoding="cl100k_base"))]
fn count_tokens_many(py: Python<'_>, texts: Vec<String>, encoding: &str) -> PyResult<Vec<u32>> {
    let enc = self::encoding(encoding)?;
    Ok(py.detach(|| texts.iter().map(|t| enc.count(t)).collect()))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<PyRegistry>()?;
    m.add_class::<PyBlock>()?;
    m.add_class::<PySelection>()?;
    m.add_class::<PyOrderView>()?;
    m.add_class::<PySnapshot>()?;
    m.add_class::<PySaved>()?;
    m.add_class::<journal::PyPendingEntry>()?;
    m.add_class::<lexical::PyBm25Index>()?;
    m.add_function(wrap_pyfunction!(lexical::terms, m)?)?;
    // the Unicode version of the term rule's letter table (the Python model's
    // unicodedata must match it for the property tests to compare exactly)
    m.add(
        "TERMS_UNICODE_VERSION",
        crate::unicode_tables::UNICODE_VERSION,
    )?;
    m.add_function(wrap_pyfunction!(snapshot::decode_registry, m)?)?;
    m.add_function(wrap_pyfunction!(snapshot::decode_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(label_of, m)?)?;
    m.add_function(wrap_pyfunction!(count_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(count_tokens_many, m)?)?;
    Ok(())
}
