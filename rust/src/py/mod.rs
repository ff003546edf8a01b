//! The one binding file: every `#[pyclass]`/`#[pyfunction]` of `rampart._core` and
//! the mapping of `CoreError` onto `rampart.errors`.
//!
//! Signatures stay primitive (ids as `str`, scores as `list[float]`); defaults,
//! argument checking and docs live in the Python façade. Every class is `frozen`
//! with the lock inside the core registry, so no "Already borrowed" under
//! threads. We never call into Python while a core lock is held (the core never
//! calls back), which is what keeps GIL + RwLock free of deadlock.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyType};

use crate::block::{Attachment, Block as CoreBlock, BlockId, NewBlock, Source, Wrap};
use crate::compile::{
    compile, CompileRequest, Exclusion, Gate, GateInput, Order, Selection as CoreSelection,
    StablePrefix,
};
use crate::error::CoreError;
use crate::persist::{self, SavedRegistry};
use crate::registry::{Position, Registry as CoreRegistry, Snapshot as CoreSnapshot};
use crate::tokens::count_cl100k;

mod journal;

/// Registries above this size release the GIL for O(n) work; below it the
/// save/restore of the thread state (~100 ns) costs more than it frees.
const DETACH_ABOVE: usize = 2048;

/// Prompts of up to this many blocks are joined from cached per-block Python
/// strings (one copy, no UTF-8 decoding: ~2× faster at the usual budgets). Larger
/// ones are rendered in Rust with the GIL released and decoded once, so an
/// unlimited compile of a huge registry does not keep a second copy of every
/// block's text alive in Python.
const JOIN_AT_MOST: usize = 512;

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

/// The prompt of a selection as a Python string, and the list of per-block
/// strings it was joined from (when it was).
fn render_prompt<'py>(
    py: Python<'py>,
    sel: &CoreSelection,
    separator: &Bound<'py, PyString>,
) -> PyResult<(Bound<'py, PyString>, Option<Bound<'py, PyList>>)> {
    match sel.included.len() {
        0 => Ok((PyString::new(py, ""), None)),
        1 => Ok((py_rendered(py, &sel.order[sel.included[0] as usize]), None)),
        n if n <= JOIN_AT_MOST => {
            let parts = PyList::new(py, sel.included_blocks().map(|b| py_rendered(py, b)))?;
            // SAFETY: `separator` and `parts` are live references held across the
            // call; PyUnicode_Join returns a new reference, or NULL with an
            // exception set, which from_owned_ptr_or_err turns into an Err.
            let joined = unsafe {
                Bound::from_owned_ptr_or_err(
                    py,
                    ffi::PyUnicode_Join(separator.as_ptr(), parts.as_ptr()),
                )
            }?;
            Ok((joined.cast_into::<PyString>()?, Some(parts)))
        }
        _ => {
            let sep = separator.to_str()?;
            let text = py.detach(|| sel.render(sep));
            Ok((PyString::new(py, &text), None))
        }
    }
}

/// The last ungated compile's output, reused while the registry's generation,
/// the budget and the separator are unchanged (agents often compile an unchanged
/// registry before every model call). Access counts still count every compile.
struct Memo {
    generation: u64,
    budget: Option<u64>,
    separator: String,
    sep_tokens: u32,
    prompt: Py<PyString>,
    included: Vec<u32>,
    /// The per-block strings the prompt was joined from, and their addresses. A
    /// later compile whose blocks carry exactly these cached strings (the same
    /// block versions: say, after a write beyond the budget) reuses the prompt
    /// without joining it again. Holding the list keeps the strings alive, so an
    /// address cannot be reused by another string meanwhile.
    parts: Option<Py<PyList>>,
    part_addrs: Vec<usize>,
    stop: Option<usize>,
    total_tokens: u64,
}

impl Memo {
    /// The memoised prompt, if `sel` emits exactly the memo's block texts under
    /// the same separator.
    fn same_prompt(&self, sel: &CoreSelection, separator: &str) -> Option<&Py<PyString>> {
        let same = self.parts.is_some()
            && self.separator == separator
            && self.part_addrs.len() == sel.included.len()
            && self
                .part_addrs
                .iter()
                .zip(sel.included_blocks())
                .all(|(&addr, b)| {
                    b.attachment()
                        .and_then(|a| texts_of(a).rendered.get())
                        .is_some_and(|s| s.as_ptr() as usize == addr)
                });
        same.then_some(&self.prompt)
    }
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

// ---- Block ---------------------------------------------------------------------

/// Read-only view of one block as it was when fetched (access_count is live).
#[pyclass(frozen, module = "rampart._core", name = "Block")]
pub struct PyBlock(Arc<CoreBlock>, Option<u64>);

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

// ---- Order view ----------------------------------------------------------------

/// The registry's order at one instant: a gate scores it and compile walks the
/// very same blocks, whatever other threads do in between.
#[pyclass(frozen, module = "rampart._core", name = "OrderView")]
pub struct PyOrderView(Order);

#[pymethods]
impl PyOrderView {
    fn __len__(&self) -> usize {
        self.0.len()
    }
    fn blocks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        views(py, self.0.iter().cloned())
    }
}

// ---- Selection -----------------------------------------------------------------

/// What a compile chose. Names and the exclusion report are built on demand, so
/// a compile costs what it includes, not what it leaves out.
#[pyclass(frozen, module = "rampart._core", name = "Selection")]
pub struct PySelection(CoreSelection);

#[pymethods]
impl PySelection {
    #[getter]
    fn total_tokens(&self) -> u64 {
        self.0.total_tokens
    }
    #[getter]
    fn budget(&self) -> Option<u64> {
        self.0.budget
    }
    #[getter]
    fn registry_size(&self) -> usize {
        self.0.order.len()
    }
    fn included_count(&self) -> usize {
        self.0.included.len()
    }
    fn included_names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.0.included_blocks().map(|b| py_name(py, b)))
    }
    fn included_ids(&self) -> Vec<String> {
        self.0
            .included_blocks()
            .map(|b| b.id.to_hyphenated())
            .collect()
    }
    fn included_costs(&self) -> Vec<u64> {
        self.0.included_costs()
    }
    fn included_blocks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        views(py, self.0.included_blocks().cloned())
    }
    /// Tool blocks sent only in the tools list (`tools_in_prompt=False`).
    fn tools_only_blocks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        views(
            py,
            self.0
                .tools_only
                .iter()
                .map(|&i| Arc::clone(&self.0.order[i as usize])),
        )
    }
    #[getter]
    fn gated(&self) -> bool {
        self.0.scores.is_some()
    }
    /// Tokens of the prompt before the first task-dependent block (SPEC §8).
    #[getter]
    fn stable_prefix_tokens(&self) -> u64 {
        self.0.stable.tokens
    }
    /// Included blocks inside the stable prefix.
    #[getter]
    fn stable_prefix_blocks(&self) -> u32 {
        self.0.stable.blocks
    }
    /// Characters of the stable prefix in the rendered prompt: its blocks and the
    /// separators between them (none after the last).
    fn stable_prefix_chars(&self, py: Python<'_>, separator_chars: usize) -> usize {
        let k = self.0.stable.blocks as usize;
        if k == 0 {
            return 0;
        }
        let text: usize = self
            .0
            .included_blocks()
            .take(k)
            .map(|b| py_rendered(py, b).len().unwrap_or(0))
            .sum();
        text + separator_chars * (k - 1)
    }
    /// Position in the order of the block that ends the stable prefix (`None`:
    /// the whole prompt is stable).
    #[getter]
    fn stable_boundary(&self) -> Option<usize> {
        self.0.stable.first_dependent
    }
    /// The block at position `i` of the order this compile saw.
    fn view_block(&self, i: usize) -> PyResult<PyBlock> {
        self.0
            .order
            .get(i)
            .map(|b| PyBlock(Arc::clone(b), None))
            .ok_or_else(|| PyIndexError::new_err(format!("no position {i} in the compiled view")))
    }
    /// Every tool block of the compiled view, registry order (gated or not).
    fn tool_blocks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        views(py, self.0.order.iter().filter(|b| b.tool).cloned())
    }
    /// Ungated blocks the prompt holds after the boundary: each interrupts the
    /// stable prefix (it could have been in front, cached).
    fn interruptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let Some(first) = self.0.stable.first_dependent else {
            return PyList::new(py, Vec::<PyBlock>::new());
        };
        views(
            py,
            self.0
                .included
                .iter()
                .filter(|&&i| i as usize > first)
                .map(|&i| &self.0.order[i as usize])
                .filter(|b| !b.gated)
                .cloned(),
        )
    }
    fn excluded_names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let ex = detach_if(py, self.0.order.len() > DETACH_ABOVE, || {
            self.0.exclusions()
        });
        PyList::new(py, ex.iter().map(|(i, _)| py_name(py, &self.0.order[*i])))
    }
    /// One row per block of the compiled view, registry order:
    /// (index, block, included, cost, reason, score, detail).
    #[allow(clippy::type_complexity)]
    fn report(
        &self,
        py: Python<'_>,
    ) -> Vec<(
        usize,
        PyBlock,
        bool,
        u64,
        Option<&'static str>,
        Option<f64>,
        String,
    )> {
        let sel = &self.0;
        let ex = detach_if(py, sel.order.len() > DETACH_ABOVE, || sel.exclusions());
        let score = |i: usize| sel.scores.as_ref().map(|s| s[i]);
        let costs = sel.included_costs();
        let mut rows = Vec::with_capacity(sel.order.len());
        for (k, &i) in sel.included.iter().enumerate() {
            let i = i as usize;
            rows.push((
                i,
                PyBlock(Arc::clone(&sel.order[i]), None),
                true,
                costs[k],
                None,
                score(i),
                String::new(),
            ));
        }
        for &i in &sel.tools_only {
            let i = i as usize;
            rows.push((
                i,
                PyBlock(Arc::clone(&sel.order[i]), None),
                true,
                0,
                Some("tools"),
                score(i),
                "sent in the tools list, not the prompt".to_string(),
            ));
        }
        for (i, why) in ex {
            let b = &sel.order[i];
            let (reason, cost, detail) = match why {
                Exclusion::Gate(s) => (
                    "gate",
                    b.cost(),
                    format!("relevance score {s:.4} did not pass the gate"),
                ),
                Exclusion::OverBudget { cost, remaining } => (
                    "budget",
                    cost,
                    format!("cost {cost} tokens exceeds the {remaining} left of the budget"),
                ),
                Exclusion::AfterStop { stopped_at } => (
                    "budget",
                    b.cost() + u64::from(sel.sep_tokens),
                    format!(
                        "budget walk stopped at block '{}' (order decides)",
                        sel.order[stopped_at].name()
                    ),
                ),
            };
            rows.push((
                i,
                PyBlock(Arc::clone(b), None),
                false,
                cost,
                Some(reason),
                score(i),
                detail,
            ));
        }
        rows.sort_by_key(|r| r.0);
        rows
    }
}

// ---- Snapshot ------------------------------------------------------------------

#[pyclass(frozen, module = "rampart._core", name = "Snapshot")]
pub struct PySnapshot(CoreSnapshot);

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

// ---- Registry ------------------------------------------------------------------

type SeedRow = (
    String,
    String,
    f64,
    Vec<String>,
    Option<String>,
    Option<u32>,
);

#[pyclass(frozen, module = "rampart._core", name = "Registry")]
pub struct PyRegistry {
    core: CoreRegistry,
    /// The last ungated compile's prompt, reused while the generation holds.
    memo: Mutex<Option<Memo>>,
}

impl PyRegistry {
    fn heavy(&self) -> bool {
        self.core.len() > DETACH_ABOVE
    }

    /// The memo lookup for an ungated compile: `Some` when the registry has not
    /// changed since a compile with the same budget and separator.
    fn memo_hit(
        &self,
        py: Python<'_>,
        order: &Order,
        generation: u64,
        budget: Option<u64>,
        separator: &str,
        sep_tokens: u32,
    ) -> Option<(Py<PyString>, CoreSelection)> {
        // Only ever locked while attached to the interpreter, and nothing inside
        // calls Python, so the GIL and this lock cannot wait on each other.
        let memo = self.memo.lock();
        let m = memo.as_ref()?;
        if m.generation != generation
            || m.budget != budget
            || m.sep_tokens != sep_tokens
            || m.separator != separator
        {
            return None;
        }
        let sel = CoreSelection {
            order: Arc::clone(order),
            included: m.included.clone(),
            tools_only: Vec::new(),
            stop: m.stop,
            admitted: None,
            scores: None,
            total_tokens: m.total_tokens,
            sep_tokens,
            budget,
            stable: StablePrefix::whole(m.included.len(), m.total_tokens),
        };
        Some((m.prompt.clone_ref(py), sel))
    }
    fn actor(&self, by: Option<&Bound<'_, PyRegistry>>) -> BlockId {
        by.map(|r| r.get().core.id())
            .unwrap_or_else(|| self.core.id())
    }
}

#[pymethods]
impl PyRegistry {
    #[new]
    #[pyo3(signature = (label, registry_id=None))]
    fn new(py: Python<'_>, label: &str, registry_id: Option<&str>) -> PyResult<Self> {
        let core = match registry_id {
            None => CoreRegistry::new(label),
            Some(s) => match BlockId::parse(s) {
                Some(id) => CoreRegistry::with_id(label, id),
                None => {
                    return Err(to_pyerr(
                        py,
                        CoreError::InvalidArgument(format!("{s:?} is not a registry id")),
                    ))
                }
            },
        };
        Ok(PyRegistry {
            core,
            memo: Mutex::new(None),
        })
    }
    #[getter]
    fn registry_id(&self) -> String {
        self.core.id().to_hyphenated()
    }
    #[getter]
    fn label(&self) -> &str {
        self.core.label()
    }
    fn __len__(&self) -> usize {
        self.core.len()
    }
    fn contains(&self, id: &str) -> bool {
        BlockId::parse(id).is_some_and(|i| self.core.contains(i))
    }

    #[pyo3(signature = (name, content, priority, source, evictable, trajectory, tags, meta, token_count, position, front, author, embedding=None, gated=true))]
    #[allow(clippy::too_many_arguments)]
    fn insert<'py>(
        &self,
        py: Python<'py>,
        name: String,
        content: String,
        priority: f64,
        source: &str,
        evictable: bool,
        trajectory: Option<String>,
        tags: Option<Vec<String>>,
        meta: Option<String>,
        token_count: Option<u32>,
        position: Option<i64>,
        front: bool,
        author: Option<&Bound<'_, PyRegistry>>,
        embedding: Option<&[u8]>,
        gated: bool,
    ) -> PyResult<Bound<'py, PyString>> {
        let embedding = match embedding {
            Some(b) => Some(floats(py, b, "embedding")?),
            None => None,
        };
        let nb = NewBlock {
            name,
            content,
            priority,
            source: parse_source(source)?,
            evictable,
            trajectory,
            tags: tags.unwrap_or_default(),
            meta,
            tool: false,
            gated,
            embedding,
            token_count,
            id: None,
            created_at: None,
        };
        let pos = match (position, front) {
            (Some(p), _) => Position::At(p),
            (None, true) => Position::Front,
            (None, false) => Position::Back,
        };
        let author = self.actor(author);
        let big = nb.token_count.is_none() && nb.content.len() > 1 << 16; // counted now
        let id = detach_if(py, big, || self.core.insert(nb, author, pos)).py_err(py)?;
        // The id straight into a Python str: this call is the hot path of
        // shared-registry coordination.
        Ok(PyString::new(py, id.encode_hyphenated(&mut [0; 36])))
    }

    /// Append seed-like blocks, all or nothing; `token_count=None` rows are
    /// counted with cl100k_base with the GIL released.
    /// `tools[i]`: row i is a tool-schema block (default: none is).
    #[pyo3(signature = (rows, source, evictable, tools=None, ungated=None))]
    fn insert_many(
        &self,
        py: Python<'_>,
        rows: Vec<SeedRow>,
        source: &str,
        evictable: bool,
        tools: Option<Vec<bool>>,
        ungated: Option<Vec<bool>>,
    ) -> PyResult<Vec<String>> {
        let source = parse_source(source)?;
        let tools = tools.unwrap_or_default();
        let ungated = ungated.unwrap_or_default();
        let blocks: Vec<NewBlock> = rows
            .into_iter()
            .enumerate()
            .map(
                |(i, (name, content, priority, tags, meta, token_count))| NewBlock {
                    name,
                    content,
                    priority,
                    source,
                    evictable,
                    trajectory: None,
                    tags,
                    meta,
                    tool: tools.get(i).copied().unwrap_or(false),
                    gated: !ungated.get(i).copied().unwrap_or(false),
                    embedding: None,
                    token_count,
                    id: None,
                    created_at: None,
                },
            )
            .collect();
        let author = self.core.id();
        let ids = py
            .detach(|| self.core.insert_many(blocks, author))
            .py_err(py)?;
        Ok(ids.into_iter().map(BlockId::to_hyphenated).collect())
    }

    fn get(&self, py: Python<'_>, id: &str) -> PyResult<PyBlock> {
        let id = parse_id(py, &self.core, id)?;
        self.core.get(id).map(|b| PyBlock(b, None)).py_err(py)
    }
    fn index_of(&self, py: Python<'_>, id: &str) -> PyResult<usize> {
        let id = parse_id(py, &self.core, id)?;
        self.core.index_of(id).py_err(py)
    }
    fn blocks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        views(py, self.core.order().iter().cloned())
    }
    fn runtime_ids(&self) -> Vec<String> {
        self.core
            .order()
            .iter()
            .map(|b| b.id.to_hyphenated())
            .collect()
    }
    fn find_by_name<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyList>> {
        views(
            py,
            self.core
                .order()
                .iter()
                .filter(|b| b.name() == name)
                .cloned(),
        )
    }
    fn find_by_tags<'py>(
        &self,
        py: Python<'py>,
        tags: Vec<String>,
        match_all: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let hit = |b: &&Arc<CoreBlock>| {
            if match_all {
                tags.iter().all(|t| b.has_tag(t))
            } else {
                tags.iter().any(|t| b.has_tag(t))
            }
        };
        views(py, self.core.order().iter().filter(hit).cloned())
    }
    fn view(&self) -> PyOrderView {
        PyOrderView(self.core.order())
    }

    fn move_to(&self, py: Python<'_>, id: &str, position: i64) -> PyResult<usize> {
        let id = parse_id(py, &self.core, id)?;
        self.core.move_to(id, position).py_err(py)
    }
    fn move_by(&self, py: Python<'_>, id: &str, steps: i64) -> PyResult<usize> {
        let id = parse_id(py, &self.core, id)?;
        self.core.move_by(id, steps).py_err(py)
    }
    fn move_next_to(&self, py: Python<'_>, id: &str, anchor: &str, after: bool) -> PyResult<usize> {
        let id = parse_id(py, &self.core, id)?;
        let anchor = parse_id(py, &self.core, anchor)?;
        self.core.move_next_to(id, anchor, after).py_err(py)
    }
    fn promote_group(&self, py: Python<'_>, ids: Vec<String>, position: i64) -> PyResult<usize> {
        let ids = parse_ids(py, &self.core, ids)?;
        detach_if(py, self.heavy(), || self.core.promote_group(&ids, position)).py_err(py)
    }

    fn update_priority(&self, py: Python<'_>, id: &str, priority: f64) -> PyResult<()> {
        let id = parse_id(py, &self.core, id)?;
        self.core.update_priority(id, priority).py_err(py)
    }
    fn set_gated(&self, py: Python<'_>, id: &str, gated: bool) -> PyResult<()> {
        let id = parse_id(py, &self.core, id)?;
        self.core.set_gated(id, gated).py_err(py)
    }
    #[pyo3(signature = (id, prefix, suffix, tokens))]
    fn set_wrap(
        &self,
        py: Python<'_>,
        id: &str,
        prefix: &str,
        suffix: &str,
        tokens: Option<u32>,
    ) -> PyResult<()> {
        let id = parse_id(py, &self.core, id)?;
        let wrap = if prefix.is_empty() && suffix.is_empty() {
            None
        } else {
            let tokens = tokens.unwrap_or_else(|| count_cl100k(prefix) + count_cl100k(suffix));
            Some(Wrap {
                prefix: prefix.into(),
                suffix: suffix.into(),
                tokens,
            })
        };
        self.core.set_wrap(id, wrap).py_err(py)
    }
    #[pyo3(signature = (id, content, token_count, by))]
    fn update_content(
        &self,
        py: Python<'_>,
        id: &str,
        content: &str,
        token_count: Option<u32>,
        by: Option<&Bound<'_, PyRegistry>>,
    ) -> PyResult<()> {
        let id = parse_id(py, &self.core, id)?;
        let actor = self.actor(by);
        self.core
            .update_content(id, content, token_count, actor)
            .py_err(py)
    }

    #[pyo3(signature = (id, force, by))]
    fn evict(
        &self,
        py: Python<'_>,
        id: &str,
        force: bool,
        by: Option<&Bound<'_, PyRegistry>>,
    ) -> PyResult<PyBlock> {
        let id = parse_id(py, &self.core, id)?;
        let actor = self.actor(by);
        detach_if(py, self.heavy(), || self.core.evict(id, force, actor))
            .map(|b| PyBlock(b, None))
            .py_err(py)
    }
    /// A caller's policy decided: rank `ids` by `scores` and remove (see
    /// `Registry::evict_scored`); returns the removed ids, ranked.
    #[pyo3(signature = (ids, scores, limit, threshold))]
    fn evict_scored(
        &self,
        py: Python<'_>,
        ids: Vec<String>,
        scores: Vec<f64>,
        limit: Option<usize>,
        threshold: Option<f64>,
    ) -> PyResult<Vec<String>> {
        if ids.len() != scores.len() {
            return Err(to_pyerr(
                py,
                CoreError::InvalidArgument(format!(
                    "{} scores for {} blocks",
                    scores.len(),
                    ids.len()
                )),
            ));
        }
        let ids = parse_ids(py, &self.core, ids)?;
        let scored: Vec<(BlockId, f64)> = ids.into_iter().zip(scores).collect();
        let removed = detach_if(py, self.heavy(), || {
            self.core.evict_scored(&scored, limit, threshold)
        })
        .py_err(py)?;
        Ok(removed.into_iter().map(BlockId::to_hyphenated).collect())
    }
    #[pyo3(signature = (limit, threshold))]
    fn evict_by_policy(
        &self,
        py: Python<'_>,
        limit: Option<usize>,
        threshold: Option<f64>,
    ) -> Vec<String> {
        let ids = detach_if(py, self.heavy(), || {
            self.core.evict_by_policy(limit, threshold)
        });
        ids.into_iter().map(BlockId::to_hyphenated).collect()
    }
    #[pyo3(signature = (trajectory, by))]
    fn rollback_trajectory(
        &self,
        py: Python<'_>,
        trajectory: &str,
        by: Option<&Bound<'_, PyRegistry>>,
    ) -> usize {
        let actor = self.actor(by);
        detach_if(py, self.heavy(), || {
            self.core.rollback_trajectory(trajectory, actor)
        })
    }
    fn snapshot(&self, py: Python<'_>) -> PySnapshot {
        PySnapshot(detach_if(py, self.heavy(), || self.core.snapshot()))
    }
    #[pyo3(signature = (snapshot, by=None))]
    fn restore(
        &self,
        py: Python<'_>,
        snapshot: &Bound<'_, PySnapshot>,
        by: Option<&Bound<'_, PyRegistry>>,
    ) -> PyResult<()> {
        let snap = &snapshot.get().0;
        let actor = self.actor(by);
        detach_if(py, snap.order.len() > DETACH_ABOVE, || {
            self.core.restore(snap, actor)
        })
        .py_err(py)
    }

    // ---- shared registries: the journal (see py/journal.rs) ----------------------

    /// Encode one mutation as a journal entry (`kind` names the operation, `args`
    /// its arguments as the local method takes them). `None`: nothing to append.
    fn journal_entry<'py>(
        &self,
        py: Python<'py>,
        origin: &[u8],
        kind: &str,
        args: &Bound<'py, pyo3::types::PyTuple>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        journal::entry(self, py, origin, kind, args)
    }
    /// Apply one journal entry; returns what the local call would return.
    fn apply_entry<'py>(
        &self,
        py: Python<'py>,
        entry: &[u8],
        me: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        journal::apply(self, py, entry, me)
    }
    /// The whole registry as a checkpoint (save format + runtime ids).
    fn checkpoint_bytes<'py>(&self, py: Python<'py>, settings: &str) -> Bound<'py, PyBytes> {
        let data = py.detach(|| self.core.checkpoint_bytes(settings));
        PyBytes::new(py, &data)
    }

    /// Stages 1–4. Returns `(prompt, selection)`; `prompt` is `None` for a dry run,
    /// which also leaves access counts alone.
    #[pyo3(signature = (budget, separator, sep_tokens, view=None, scores=None, threshold=None, top_k=None, dry_run=false, tools_in_prompt=true))]
    #[allow(clippy::too_many_arguments)]
    fn compile<'py>(
        &self,
        py: Python<'py>,
        budget: Option<u64>,
        separator: &Bound<'py, PyString>,
        sep_tokens: u32,
        view: Option<&Bound<'_, PyOrderView>>,
        scores: Option<Vec<f64>>,
        threshold: Option<f64>,
        top_k: Option<usize>,
        dry_run: bool,
        tools_in_prompt: bool,
    ) -> PyResult<(Option<Bound<'py, PyString>>, PySelection)> {
        let gate = scores.map(|scores| Gate {
            scores,
            threshold,
            top_k,
        });
        let gated = gate.is_some();
        // The memo applies to ungated compiles of the current order only.
        let (order, memo_key) = match view {
            Some(v) => (Arc::clone(&v.get().0), None),
            None => {
                let (o, g) = self.core.order_and_generation();
                (o, (!gated && !dry_run && tools_in_prompt).then_some(g))
            }
        };
        let sep = separator.to_str()?;
        if let Some(g) = memo_key {
            if let Some((prompt, sel)) = self.memo_hit(py, &order, g, budget, sep, sep_tokens) {
                sel.record_access();
                return Ok((Some(prompt.into_bound(py)), PySelection(sel)));
            }
        }
        let heavy = order.len() > DETACH_ABOVE;
        let req = CompileRequest {
            budget,
            sep_tokens,
            gate: gate.map_or(GateInput::None, GateInput::Scores),
            tools_in_prompt,
            dry_run,
        };
        let sel = detach_if(py, heavy, || compile(order, req)).py_err(py)?;
        if dry_run {
            return Ok((None, PySelection(sel)));
        }
        let Some(g) = memo_key else {
            let (prompt, _) = render_prompt(py, &sel, separator)?;
            return Ok((Some(prompt), PySelection(sel)));
        };
        // Same block versions emitted as last time: keep the prompt and the memo's
        // block list, move the memo to this generation.
        {
            let mut memo = self.memo.lock();
            if let Some(m) = memo.as_mut() {
                if m.same_prompt(&sel, sep).is_some() {
                    m.generation = g;
                    m.budget = budget;
                    m.sep_tokens = sep_tokens;
                    m.included.clone_from(&sel.included);
                    m.stop = sel.stop;
                    m.total_tokens = sel.total_tokens;
                    let prompt = m.prompt.clone_ref(py).into_bound(py);
                    return Ok((Some(prompt), PySelection(sel)));
                }
            }
        }
        let (prompt, parts) = render_prompt(py, &sel, separator)?;
        let part_addrs = match &parts {
            Some(list) => list.iter().map(|s| s.as_ptr() as usize).collect(),
            None => Vec::new(),
        };
        *self.memo.lock() = Some(Memo {
            generation: g,
            budget,
            separator: sep.to_owned(),
            sep_tokens,
            prompt: prompt.clone().unbind(),
            included: sel.included.clone(),
            parts: parts.map(Bound::unbind),
            part_addrs,
            stop: sel.stop,
            total_tokens: sel.total_tokens,
        });
        Ok((Some(prompt), PySelection(sel)))
    }

    // ---- persistence ------------------------------------------------------------

    /// The whole registry in the file format of `persist.rs`.
    fn save_bytes<'py>(&self, py: Python<'py>, settings: &str) -> Bound<'py, PyBytes> {
        let data = py.detach(|| self.core.save_bytes(settings));
        PyBytes::new(py, &data)
    }
    /// Fill this (empty) registry from a decoded file; returns the block count.
    fn install(&self, py: Python<'_>, saved: &Bound<'_, PySaved>) -> PyResult<usize> {
        let taken = saved.get().saved.lock().take();
        let Some(saved) = taken else {
            return Err(PyValueError::new_err(
                "this decoded file was already installed",
            ));
        };
        let (saved, ids) = saved;
        py.detach(|| self.core.install_as(saved, ids)).py_err(py)
    }

    // ---- embeddings and the cosine gate ----------------------------------------

    /// Blocks that have no vector yet, registry order.
    fn unembedded<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let missing = detach_if(py, self.heavy(), || self.core.unembedded());
        views(py, missing.into_iter())
    }
    /// Store the vectors of `blocks` (rows of `matrix`, float32 bytes, `dim` wide);
    /// returns how many were stored (blocks changed meanwhile are skipped).
    fn attach_embeddings(
        &self,
        py: Python<'_>,
        blocks: Vec<PyRef<'_, PyBlock>>,
        matrix: &[u8],
        dim: usize,
        truncated: Vec<bool>,
    ) -> PyResult<usize> {
        let values = floats(py, matrix, "embedding matrix")?;
        if dim == 0 || values.len() != blocks.len() * dim || truncated.len() != blocks.len() {
            return Err(to_pyerr(
                py,
                CoreError::InvalidArgument(format!(
                    "embedding model returned {} values for {} blocks of dimension {dim}",
                    values.len(),
                    blocks.len()
                )),
            ));
        }
        let items: Vec<(Arc<CoreBlock>, &[f32], bool)> = blocks
            .iter()
            .zip(values.chunks_exact(dim))
            .zip(&truncated)
            .map(|((b, v), &t)| (Arc::clone(&b.0), v, t))
            .collect();
        detach_if(py, items.len() > DETACH_ABOVE, || {
            self.core.attach_embeddings(&items)
        })
        .py_err(py)
    }
    fn set_embedding(&self, py: Python<'_>, id: &str, vector: &[u8]) -> PyResult<()> {
        let id = parse_id(py, &self.core, id)?;
        let v = floats(py, vector, "embedding")?;
        self.core.set_embedding(id, &v).py_err(py)
    }
    /// The stored vector of this block version, as float32 bytes.
    fn embedding<'py>(&self, py: Python<'py>, block: &PyBlock) -> Option<Bound<'py, PyBytes>> {
        self.core
            .embedding_of(&block.0)
            .map(|v| float_bytes(py, &v))
    }
    /// (dimension, rows in use, bytes held, quantised).
    fn embedding_stats(&self) -> (usize, usize, usize, bool) {
        self.core.embedding_stats()
    }
    fn set_quantised(&self, py: Python<'_>, on: bool) {
        detach_if(py, self.heavy(), || self.core.set_quantised(on));
    }
    /// Stages 1–4 with the built-in cosine gate against `query` (float32 bytes).
    /// `None`: some block has no vector yet (embed `unembedded()` and retry).
    #[pyo3(signature = (query, threshold, top_k, budget, separator, sep_tokens, dry_run=false, tools_in_prompt=true))]
    #[allow(clippy::too_many_arguments)]
    fn compile_cosine<'py>(
        &self,
        py: Python<'py>,
        query: &[u8],
        threshold: Option<f64>,
        top_k: Option<usize>,
        budget: Option<u64>,
        separator: &Bound<'py, PyString>,
        sep_tokens: u32,
        dry_run: bool,
        tools_in_prompt: bool,
    ) -> PyResult<Option<(Option<Bound<'py, PyString>>, PySelection)>> {
        let q = floats(py, query, "task_embedding")?;
        let sel = detach_if(py, self.heavy(), || {
            let Some((order, gate)) = self.core.cosine_admission(&q, threshold, top_k)? else {
                return Ok(None);
            };
            let req = CompileRequest {
                budget,
                sep_tokens,
                gate,
                tools_in_prompt,
                dry_run,
            };
            compile(order, req).map(Some)
        })
        .py_err(py)?;
        let Some(sel) = sel else { return Ok(None) };
        if dry_run {
            return Ok(Some((None, PySelection(sel))));
        }
        let (prompt, _) = render_prompt(py, &sel, separator)?;
        Ok(Some((Some(prompt), PySelection(sel))))
    }
    /// Blocks by cosine score, descending; `None` as for `compile_cosine`.
    #[pyo3(signature = (query, top_k=None, threshold=None))]
    fn rank<'py>(
        &self,
        py: Python<'py>,
        query: &[u8],
        top_k: Option<usize>,
        threshold: Option<f64>,
    ) -> PyResult<Option<Vec<(PyBlock, f64)>>> {
        let q = floats(py, query, "task_embedding")?;
        let ranked =
            detach_if(py, self.heavy(), || self.core.rank(&q, top_k, threshold)).py_err(py)?;
        Ok(ranked.map(|r| r.into_iter().map(|(b, s)| (PyBlock(b, None), s)).collect()))
    }
    /// Cosine score of one block; `None` if it has no vector yet.
    fn score(&self, py: Python<'_>, id: &str, query: &[u8]) -> PyResult<Option<f64>> {
        let id = parse_id(py, &self.core, id)?;
        let q = floats(py, query, "task_embedding")?;
        self.core.score(id, &q).py_err(py)
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

/// Decode and check a shared registry's checkpoint (`RegistryFileError` if bad);
/// installing it keeps the runtime ids.
#[pyfunction]
fn decode_checkpoint(py: Python<'_>, data: &[u8]) -> PyResult<PySaved> {
    let (s, ids) = py
        .detach(|| crate::journal::decode_checkpoint(data))
        .py_err(py)?;
    Ok(saved(s, Some(ids)))
}

/// Decode and check a saved registry file's bytes (`RegistryFileError` if bad).
#[pyfunction]
fn decode_registry(py: Python<'_>, data: &[u8]) -> PyResult<PySaved> {
    let s = py.detach(|| persist::decode(data)).py_err(py)?;
    Ok(saved(s, None))
}

/// The label this process knows for a registry id (None: unknown).
#[pyfunction]
fn label_of(registry_id: &str) -> Option<String> {
    BlockId::parse(registry_id).and_then(crate::registry::known_label)
}

/// Tokens of `text` under cl100k_base (exact, offline).
#[pyfunction]
fn count_tokens(py: Python<'_>, text: &str) -> u32 {
    detach_if(py, text.len() > 1 << 16, || count_cl100k(text))
}

/// Tokens of each text under cl100k_base, with the GIL released.
#[pyfunction]
fn count_tokens_many(py: Python<'_>, texts: Vec<String>) -> Vec<u32> {
    py.detach(|| texts.iter().map(|t| count_cl100k(t)).collect())
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
    m.add_function(wrap_pyfunction!(decode_registry, m)?)?;
    m.add_function(wrap_pyfunction!(decode_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(label_of, m)?)?;
    m.add_function(wrap_pyfunction!(count_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(count_tokens_many, m)?)?;
    Ok(())
}
