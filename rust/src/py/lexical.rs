//! `Bm25Index` and `terms`: the lexical scorer of `rampart.relevance`.

use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::detach_if;
use crate::lexical::{self, Bm25Index};

/// Texts past this many bytes (summed) are tokenised with the GIL released.
const DETACH_BYTES: usize = 1 << 16;

#[pyclass(frozen, module = "rampart._core", name = "Bm25Index")]
pub struct PyBm25Index(Mutex<Bm25Index>);

#[pymethods]
impl PyBm25Index {
    #[new]
    #[pyo3(signature = (k1=1.2, b=0.75))]
    fn new(k1: f64, b: f64) -> PyResult<Self> {
        if !(k1.is_finite() && k1 >= 0.0 && b.is_finite() && (0.0..=1.0).contains(&b)) {
            return Err(PyValueError::new_err(format!(
                "BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}"
            )));
        }
        Ok(Self(Mutex::new(Bm25Index::new(k1, b))))
    }

    fn __len__(&self) -> usize {
        self.0.lock().len()
    }

    /// Add documents in order; returns the index of the first.
    fn add(&self, py: Python<'_>, texts: Vec<String>) -> usize {
        let heavy = texts.iter().map(String::len).sum::<usize>() > DETACH_BYTES;
        detach_if(py, heavy, || {
            let mut ix = self.0.lock();
            let first = ix.len();
            for t in &texts {
                ix.add(t);
            }
            first
        })
    }

    /// Every document's score for `query`, in document order.
    fn scores(&self, py: Python<'_>, query: &str) -> Vec<f64> {
        let heavy = self.0.lock().len() > 4096 || query.len() > DETACH_BYTES;
        detach_if(py, heavy, || self.0.lock().scores(query))
    }
}

/// The terms of `text` under the lexical rule (rampart.relevance.lexical.terms).
#[pyfunction]
pub fn terms(py: Python<'_>, text: &str) -> Vec<String> {
    detach_if(py, text.len() > DETACH_BYTES, || lexical::terms(text))
}
