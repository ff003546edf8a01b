//! `rampart._core.Registry`: reads, the one compile entry, persistence,
//! embeddings, and one method per write operation. A write method only turns
//! its arguments into the journal's `Op` value and hands it to `run`
//! (`py/journal.rs`): a local registry applies it at once, a shared registry's
//! replica encodes, appends and applies that same value. Adding a write
//! operation: the `Op` variant with its codec and apply (`journal.rs`), one
//! method here, its stub (`_core.pyi`), the façade method, tests.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use super::selection::{render_prompt, Memo, PyOrderView, PySelection};
use super::snapshot::{PySaved, PySnapshot};
use super::{
    detach_if, float_bytes, floats, parse_id, parse_ids, parse_source, to_pyerr, views, IntoPy,
    PyBlock, DETACH_ABOVE,
};
use crate::block::{Block as CoreBlock, BlockId, NewBlock, Wrap};
use crate::compile::{
    compile, CompileRequest, Gate, GateInput, Order, Selection as CoreSelection, StablePrefix,
};
use crate::error::CoreError;
use crate::journal::{Op, Restored};
use crate::registry::{Position, Registry as CoreRegistry};
use crate::tokens::count_cl100k;

/// One seed-like row of `insert_many`: name, content, priority, tags, metadata
/// JSON, token count (`None`: count with cl100k_base).
type SeedRow = (
    String,
    String,
    f64,
    Vec<String>,
    Option<String>,
    Option<u32>,
);

/// A compile's relevance gate: the task vector for the built-in cosine gate
/// (float32 bytes), or one score per block of `view` from a gate callable.
#[derive(FromPyObject)]
pub enum GateArg<'py> {
    Query(Bound<'py, PyBytes>),
    Scores(Vec<f64>),
}

#[pyclass(frozen, module = "rampart._core", name = "Registry")]
pub struct PyRegistry {
    pub(super) core: CoreRegistry,
    /// The last ungated compile's prompt, reused while the generation holds.
    memo: Mutex<Option<Memo>>,
    /// A shared registry's replica origin: while set, every write returns its
    /// journal entry, encoded under this origin, instead of applying it
    /// (`py/journal.rs`).
    pub(super) journal: Mutex<Option<BlockId>>,
    /// Whether `journal` is set: one relaxed load on a local write, no lock.
    pub(super) journaled: AtomicBool,
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
    fn id(&self, py: Python<'_>, id: &str) -> PyResult<BlockId> {
        parse_id(py, &self.core, id)
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
            journal: Mutex::new(None),
            journaled: AtomicBool::new(false),
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

    // ---- writes: one Op each, applied by `run` (py/journal.rs) ------------------

    /// Write one block; returns its runtime id.
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
    ) -> PyResult<Bound<'py, PyAny>> {
        let embedding = match embedding {
            Some(b) => Some(floats(py, b, "embedding")?),
            None => None,
        };
        // Counted now, with the GIL released, when long and not counted yet.
        let heavy = token_count.is_none() && content.len() > 1 << 16;
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
        let position = match (position, front) {
            (Some(p), _) => Position::At(p),
            (None, true) => Position::Front,
            (None, false) => Position::Back,
        };
        let op = Op::Insert {
            author: self.actor(author),
            position: Some(position),
            blocks: vec![nb],
        };
        self.run(py, op, heavy)
    }

    /// Append seed-like blocks, all or nothing; `token_count=None` rows are
    /// counted with cl100k_base with the GIL released. `tools[i]`: row i is a
    /// tool-schema block; `ungated[i]`: the gate never drops row i.
    #[pyo3(signature = (rows, source, evictable, tools=None, ungated=None))]
    fn insert_many<'py>(
        &self,
        py: Python<'py>,
        rows: Vec<SeedRow>,
        source: &str,
        evictable: bool,
        tools: Option<Vec<bool>>,
        ungated: Option<Vec<bool>>,
    ) -> PyResult<Bound<'py, PyAny>> {
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
        let op = Op::Insert {
            author: self.core.id(),
            position: None,
            blocks,
        };
        self.run(py, op, true)
    }

    fn move_to<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        position: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = Op::MoveTo {
            id: self.id(py, id)?,
            position,
        };
        self.run(py, op, false)
    }
    fn move_by<'py>(&self, py: Python<'py>, id: &str, steps: i64) -> PyResult<Bound<'py, PyAny>> {
        let op = Op::MoveBy {
            id: self.id(py, id)?,
            steps,
        };
        self.run(py, op, false)
    }
    fn move_next_to<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        anchor: &str,
        after: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = Op::MoveNextTo {
            id: self.id(py, id)?,
            anchor: self.id(py, anchor)?,
            after,
        };
        self.run(py, op, false)
    }
    fn promote_group<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<String>,
        position: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = Op::PromoteGroup {
            ids: parse_ids(py, &self.core, ids)?,
            position,
        };
        self.run(py, op, self.heavy())
    }
    fn update_priority<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        priority: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = Op::UpdatePriority {
            id: self.id(py, id)?,
            priority,
        };
        self.run(py, op, false)
    }
    fn set_gated<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        gated: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = Op::SetGated {
            id: self.id(py, id)?,
            gated,
        };
        self.run(py, op, false)
    }
    /// Empty prefix and suffix remove the wrap; `tokens=None` counts them.
    #[pyo3(signature = (id, prefix, suffix, tokens))]
    fn set_wrap<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        prefix: &str,
        suffix: &str,
        tokens: Option<u32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let wrap = (!(prefix.is_empty() && suffix.is_empty())).then(|| Wrap {
            prefix: prefix.into(),
            suffix: suffix.into(),
            tokens: tokens.unwrap_or_else(|| count_cl100k(prefix) + count_cl100k(suffix)),
        });
        let op = Op::SetWrap {
            id: self.id(py, id)?,
            wrap,
        };
        self.run(py, op, false)
    }
    #[pyo3(signature = (id, content, token_count, by))]
    fn update_content<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        content: String,
        token_count: Option<u32>,
        by: Option<&Bound<'_, PyRegistry>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let heavy = token_count.is_none() && content.len() > 1 << 16;
        let op = Op::UpdateContent {
            id: self.id(py, id)?,
            content,
            token_count,
            actor: self.actor(by),
        };
        self.run(py, op, heavy)
    }
    /// Remove one block; returns a view of it as it was.
    #[pyo3(signature = (id, force, by))]
    fn evict<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        force: bool,
        by: Option<&Bound<'_, PyRegistry>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = Op::Evict {
            id: self.id(py, id)?,
            force,
            actor: self.actor(by),
        };
        self.run(py, op, self.heavy())
    }
    /// An eviction policy decided: rank `ids` by `scores` and remove (see
    /// `Registry::evict_scored`); `ids=None` scores every evictable block with
    /// the default policy here. Returns the removed ids, ranked.
    #[pyo3(signature = (ids, scores, limit, threshold))]
    fn evict_scored<'py>(
        &self,
        py: Python<'py>,
        ids: Option<Vec<String>>,
        scores: Option<Vec<f64>>,
        limit: Option<u64>,
        threshold: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let scored: Vec<(BlockId, f64)> = match (ids, scores) {
            (Some(ids), Some(scores)) if ids.len() == scores.len() => {
                parse_ids(py, &self.core, ids)?
                    .into_iter()
                    .zip(scores)
                    .collect()
            }
            (None, None) => detach_if(py, self.heavy(), || self.core.default_eviction_scores()),
            (ids, scores) => {
                return Err(to_pyerr(
                    py,
                    CoreError::InvalidArgument(format!(
                        "{} scores for {} blocks",
                        scores.map_or(0, |s| s.len()),
                        ids.map_or(0, |i| i.len())
                    )),
                ))
            }
        };
        let op = Op::EvictScored {
            scored,
            limit,
            threshold,
        };
        self.run(py, op, self.heavy())
    }
    #[pyo3(signature = (trajectory, by))]
    fn rollback_trajectory<'py>(
        &self,
        py: Python<'py>,
        trajectory: String,
        by: Option<&Bound<'_, PyRegistry>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = Op::Rollback {
            trajectory,
            actor: self.actor(by),
        };
        self.run(py, op, self.heavy())
    }
    fn snapshot(&self, py: Python<'_>) -> PySnapshot {
        PySnapshot(detach_if(py, self.heavy(), || self.core.snapshot()))
    }
    /// Put a snapshot back, every block under a new id (drawn here, so every
    /// replica of a shared registry uses the same ones).
    #[pyo3(signature = (snapshot, by=None))]
    fn restore<'py>(
        &self,
        py: Python<'py>,
        snapshot: &Bound<'_, PySnapshot>,
        by: Option<&Bound<'_, PyRegistry>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let snap = Box::new(snapshot.get().0.clone());
        let heavy = snap.order.len() > DETACH_ABOVE;
        let new_ids = (0..snap.order.len()).map(|_| BlockId::random()).collect();
        let op = Op::Restore {
            snapshot: Restored::Taken(snap),
            new_ids,
            actor: self.actor(by),
        };
        self.run(py, op, heavy)
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
        let (order, generation) = self.core.order_and_generation();
        PyOrderView(order, generation)
    }

    // ---- shared registries: what a replica needs (py/journal.rs) ----------------

    /// Make every later write return its journal entry (a `PendingEntry`,
    /// encoded under the replica origin `origin`) instead of applying it
    /// (`None`: apply locally again). See `run`.
    fn attach_journal(&self, py: Python<'_>, origin: Option<&[u8]>) -> PyResult<()> {
        self.set_journal(py, origin)
    }
    /// Apply one journal entry; returns what the local call would return.
    fn apply_entry<'py>(
        &self,
        py: Python<'py>,
        entry: &[u8],
        me: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        self.apply_journal_entry(py, entry, me)
    }
    /// The entry publishing this replica's unpublished access counts (`None`:
    /// nothing counted since the last one); they count as published from now.
    fn access_entry<'py>(
        &self,
        py: Python<'py>,
        origin: &[u8],
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.encode_access(py, origin)
    }
    /// The entry publishing vectors computed here (rows of `matrix`).
    fn embed_entry<'py>(
        &self,
        py: Python<'py>,
        origin: &[u8],
        blocks: Vec<PyRef<'py, PyBlock>>,
        matrix: &[u8],
        dim: usize,
        truncated: Vec<bool>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.encode_embed(py, origin, &blocks, matrix, dim, truncated)
    }
    /// The whole registry as a checkpoint (save format + runtime ids), with the
    /// access counts the journal holds.
    fn checkpoint_bytes<'py>(&self, py: Python<'py>, settings: &str) -> Bound<'py, PyBytes> {
        let data = py.detach(|| self.core.checkpoint_bytes(settings));
        PyBytes::new(py, &data)
    }
    /// Replace everything this replica holds by a decoded checkpoint, in place.
    fn reset_to(&self, py: Python<'_>, saved: &Bound<'_, PySaved>) -> PyResult<usize> {
        let (saved, ids) = saved.get().take(py)?;
        let ids =
            ids.ok_or_else(|| PyValueError::new_err("a checkpoint carries its runtime ids"))?;
        py.detach(|| self.core.reset_to(saved, ids)).py_err(py)
    }

    // ---- compile ----------------------------------------------------------------

    /// Stages 1–4, the one compile entry. `gate`: `None`, the task vector (the
    /// built-in cosine gate) or a gate callable's scores for `view`. Returns
    /// `(prompt, selection)` (`prompt` is `None` for a dry run, which also leaves
    /// access counts alone), or `None` when the cosine gate found a block with
    /// no vector yet (embed `unembedded()` and retry).
    #[pyo3(signature = (budget, separator, sep_tokens, gate=None, view=None, threshold=None, top_k=None, dry_run=false, tools_in_prompt=true))]
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::type_complexity)]
    fn compile<'py>(
        &self,
        py: Python<'py>,
        budget: Option<u64>,
        separator: &Bound<'py, PyString>,
        sep_tokens: u32,
        gate: Option<GateArg<'py>>,
        view: Option<&Bound<'_, PyOrderView>>,
        threshold: Option<f64>,
        top_k: Option<usize>,
        dry_run: bool,
        tools_in_prompt: bool,
    ) -> PyResult<Option<(Option<Bound<'py, PyString>>, PySelection)>> {
        let (order, gate, memo_key) = match gate {
            Some(GateArg::Query(query)) => {
                let q = floats(py, query.as_bytes(), "task_embedding")?;
                let decided = detach_if(py, self.heavy(), || {
                    self.core.cosine_admission(&q, threshold, top_k)
                })
                .py_err(py)?;
                let Some((order, gate)) = decided else {
                    return Ok(None);
                };
                (order, gate, None)
            }
            Some(GateArg::Scores(scores)) => {
                let order = match view {
                    Some(v) => Arc::clone(&v.get().0),
                    None => self.core.order(),
                };
                let gate = GateInput::Scores(Gate {
                    scores,
                    threshold,
                    top_k,
                });
                (order, gate, None)
            }
            None => {
                // The memo applies to ungated compiles of the current order only.
                let (order, memo_key) = match view {
                    Some(v) => (Arc::clone(&v.get().0), None),
                    None => {
                        let (o, g) = self.core.order_and_generation();
                        (o, (!dry_run && tools_in_prompt).then_some(g))
                    }
                };
                (order, GateInput::None, memo_key)
            }
        };
        let sep = separator.to_str()?;
        if let Some(g) = memo_key {
            if let Some((prompt, sel)) = self.memo_hit(py, &order, g, budget, sep, sep_tokens) {
                sel.record_access();
                return Ok(Some((Some(prompt.into_bound(py)), PySelection(sel))));
            }
        }
        let heavy = order.len() > DETACH_ABOVE;
        let req = CompileRequest {
            budget,
            sep_tokens,
            gate,
            tools_in_prompt,
            dry_run,
        };
        let sel = detach_if(py, heavy, || compile(order, req)).py_err(py)?;
        if dry_run {
            return Ok(Some((None, PySelection(sel))));
        }
        let Some(g) = memo_key else {
            let (prompt, _) = render_prompt(py, &sel, separator)?;
            return Ok(Some((Some(prompt), PySelection(sel))));
        };
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
                    return Ok(Some((Some(prompt), PySelection(sel))));
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
        Ok(Some((Some(prompt), PySelection(sel))))
    }

    // ---- persistence ------------------------------------------------------------

    /// The whole registry in the file format of `persist.rs`.
    fn save_bytes<'py>(&self, py: Python<'py>, settings: &str) -> Bound<'py, PyBytes> {
        let data = py.detach(|| self.core.save_bytes(settings));
        PyBytes::new(py, &data)
    }
    /// Fill this (empty) registry from a decoded file; returns the block count.
    /// Fill this (empty) registry from a decoded file; returns the block count.
    fn install(&self, py: Python<'_>, saved: &Bound<'_, PySaved>) -> PyResult<usize> {
        let (saved, ids) = saved.get().take(py)?;
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
    /// Blocks by cosine score, descending; `None` as for a cosine `compile`.
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
