//! `OrderView` and `Selection` (what a compile chose, with its report and the
//! stable prefix), and rendering a selection into the prompt string, with the
//! memo that reuses the last ungated prompt.

use std::sync::Arc;

use pyo3::exceptions::PyIndexError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use super::{
    detach_if, py_name, py_rendered, texts_of, views, PyBlock, DETACH_ABOVE, JOIN_AT_MOST,
};
use crate::compile::{Exclusion, Order, Selection as CoreSelection};

/// The prompt of a selection as a Python string, and the list of per-block
/// strings it was joined from (when it was).
pub(super) fn render_prompt<'py>(
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
pub(super) struct Memo {
    pub(super) generation: u64,
    pub(super) budget: Option<u64>,
    pub(super) separator: String,
    pub(super) sep_tokens: u32,
    pub(super) prompt: Py<PyString>,
    pub(super) included: Vec<u32>,
    /// The per-block strings the prompt was joined from, and their addresses. A
    /// later compile whose blocks carry exactly these cached strings (the same
    /// block versions: say, after a write beyond the budget) reuses the prompt
    /// without joining it again. Holding the list keeps the strings alive, so an
    /// address cannot be reused by another string meanwhile.
    pub(super) parts: Option<Py<PyList>>,
    pub(super) part_addrs: Vec<usize>,
    pub(super) stop: Option<usize>,
    pub(super) total_tokens: u64,
}

impl Memo {
    /// The memoised prompt, if `sel` emits exactly the memo's block texts under
    /// the same separator.
    pub(super) fn same_prompt(
        &self,
        sel: &CoreSelection,
        separator: &str,
    ) -> Option<&Py<PyString>> {
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

// ---- Order view ----------------------------------------------------------------

/// The registry's order at one instant: a gate scores it and compile walks the
/// very same blocks, whatever other threads do in between.
#[pyclass(frozen, module = "rampart._core", name = "OrderView")]
pub struct PyOrderView(pub(super) Order, pub(super) u64);

#[pymethods]
impl PyOrderView {
    /// The registry's change counter when the view was taken: equal for two
    /// views means the same blocks in the same order (a gate can keep what it
    /// derived from the first).
    #[getter]
    fn generation(&self) -> u64 {
        self.1
    }
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
pub struct PySelection(pub(super) CoreSelection);

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
    /// Tokens of the prompt before the first task-dependent block (docs/specification.md §8).
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
