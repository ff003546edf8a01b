//! Binding of the shared-registry journal (`crate::journal`): encode a mutation
//! the way the local method takes its arguments, apply an entry and hand back
//! what the local method returns. The replica logic (append, order, follow)
//! lives in `rampart/_replica.py`; this file only converts.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use super::{
    floats, parse_id, parse_ids, parse_source, to_pyerr, IntoPy, PyBlock, PyRegistry, PySnapshot,
    SeedRow,
};
use crate::block::{BlockId, NewBlock, Wrap};
use crate::error::CoreError;
use crate::journal::{decode_entry, encode_entry, snapshot_bytes, stamp, Op, Outcome};
use crate::registry::{text_hash, Position};
use crate::tokens::count_cl100k;

fn origin_id(py: Python<'_>, raw: &[u8]) -> PyResult<BlockId> {
    raw.try_into().map(BlockId).map_err(|_| {
        to_pyerr(
            py,
            CoreError::InvalidArgument("a replica origin is 16 bytes".into()),
        )
    })
}

fn actor(reg: &PyRegistry, by: Option<Bound<'_, PyRegistry>>) -> BlockId {
    by.map(|r| r.get().core.id())
        .unwrap_or_else(|| reg.core.id())
}

/// Encode `kind(args…)` as an entry; `None` when there is nothing to append
/// (no access counted since the last flush).
pub(super) fn entry<'py>(
    reg: &PyRegistry,
    py: Python<'py>,
    origin: &[u8],
    kind: &str,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let origin = origin_id(py, origin)?;
    let core = &reg.core;
    let id = |s: String| parse_id(py, core, &s);
    let op = match kind {
        "insert" => {
            // Two halves: PyO3 extracts tuples of at most 12 items.
            #[allow(clippy::type_complexity)]
            let (
                (name, content, priority, source, evictable, trajectory),
                (tags, meta, token_count, position, front, author, embedding, gated),
            ): (
                (String, String, f64, String, bool, Option<String>),
                (
                    Option<Vec<String>>,
                    Option<String>,
                    Option<u32>,
                    Option<i64>,
                    bool,
                    Option<Bound<'py, PyRegistry>>,
                    Option<Vec<u8>>,
                    bool,
                ),
            ) = args.extract()?;
            let mut nb = NewBlock::new(name, content);
            nb.priority = priority;
            nb.source = parse_source(&source)?;
            nb.evictable = evictable;
            nb.trajectory = trajectory;
            nb.gated = gated;
            nb.tags = tags.unwrap_or_default();
            nb.meta = meta;
            nb.token_count = token_count;
            nb.embedding = match embedding {
                Some(b) => Some(floats(py, &b, "embedding")?),
                None => None,
            };
            let mut blocks = vec![nb];
            stamp(&mut blocks);
            let position = match (position, front) {
                (Some(p), _) => Position::At(p),
                (None, true) => Position::Front,
                (None, false) => Position::Back,
            };
            Op::Insert {
                author: actor(reg, author),
                position: Some(position),
                blocks,
            }
        }
        "insert_many" => {
            #[allow(clippy::type_complexity)]
            let (rows, source, evictable, tools, ungated): (
                Vec<SeedRow>,
                String,
                bool,
                Option<Vec<bool>>,
                Option<Vec<bool>>,
            ) = args.extract()?;
            let source = parse_source(&source)?;
            let tools = tools.unwrap_or_default();
            let ungated = ungated.unwrap_or_default();
            let mut blocks: Vec<NewBlock> = rows
                .into_iter()
                .enumerate()
                .map(|(i, (name, content, priority, tags, meta, token_count))| {
                    let mut nb = NewBlock::new(name, content);
                    nb.priority = priority;
                    nb.source = source;
                    nb.evictable = evictable;
                    nb.tags = tags;
                    nb.meta = meta;
                    nb.tool = tools.get(i).copied().unwrap_or(false);
                    nb.gated = !ungated.get(i).copied().unwrap_or(false);
                    // Replicas must not each count a large seed set: count once here.
                    nb.token_count = Some(token_count.unwrap_or_else(|| count_cl100k(&nb.content)));
                    nb
                })
                .collect();
            stamp(&mut blocks);
            Op::Insert {
                author: core.id(),
                position: None,
                blocks,
            }
        }
        "update_content" => {
            let (i, content, token_count, by): (
                String,
                String,
                Option<u32>,
                Option<Bound<'py, PyRegistry>>,
            ) = args.extract()?;
            Op::UpdateContent {
                id: id(i)?,
                content,
                token_count,
                actor: actor(reg, by),
            }
        }
        "update_priority" => {
            let (i, priority): (String, f64) = args.extract()?;
            Op::UpdatePriority {
                id: id(i)?,
                priority,
            }
        }
        "set_wrap" => {
            let (i, prefix, suffix, tokens): (String, String, String, Option<u32>) =
                args.extract()?;
            let wrap = (!(prefix.is_empty() && suffix.is_empty())).then(|| {
                let tokens =
                    tokens.unwrap_or_else(|| count_cl100k(&prefix) + count_cl100k(&suffix));
                Wrap {
                    prefix: prefix.into(),
                    suffix: suffix.into(),
                    tokens,
                }
            });
            Op::SetWrap { id: id(i)?, wrap }
        }
        "set_gated" => {
            let (i, gated): (String, bool) = args.extract()?;
            Op::SetGated { id: id(i)?, gated }
        }
        "move_to" => {
            let (i, position): (String, i64) = args.extract()?;
            Op::MoveTo {
                id: id(i)?,
                position,
            }
        }
        "move_by" => {
            let (i, steps): (String, i64) = args.extract()?;
            Op::MoveBy { id: id(i)?, steps }
        }
        "move_next_to" => {
            let (i, anchor, after): (String, String, bool) = args.extract()?;
            Op::MoveNextTo {
                id: id(i)?,
                anchor: id(anchor)?,
                after,
            }
        }
        "promote_group" => {
            let (ids, position): (Vec<String>, i64) = args.extract()?;
            Op::PromoteGroup {
                ids: parse_ids(py, core, ids)?,
                position,
            }
        }
        "evict" => {
            let (i, force, by): (String, bool, Option<Bound<'py, PyRegistry>>) = args.extract()?;
            Op::Evict {
                id: id(i)?,
                force,
                actor: actor(reg, by),
            }
        }
        "evict_scored" => {
            let (ids, scores, limit, threshold): (Vec<String>, Vec<f64>, Option<u64>, Option<f64>) =
                args.extract()?;
            let ids = parse_ids(py, core, ids)?;
            Op::EvictScored {
                scored: ids.into_iter().zip(scores).collect(),
                limit,
                threshold,
            }
        }
        "rollback" => {
            let (trajectory, by): (String, Option<Bound<'py, PyRegistry>>) = args.extract()?;
            Op::Rollback {
                trajectory,
                actor: actor(reg, by),
            }
        }
        "restore" => {
            let (snap, by): (Bound<'py, PySnapshot>, Option<Bound<'py, PyRegistry>>) =
                args.extract()?;
            let snap = &snap.get().0;
            let new_ids = (0..snap.order.len()).map(|_| BlockId::random()).collect();
            Op::Restore {
                snapshot: py.detach(|| snapshot_bytes(snap)),
                new_ids,
                actor: actor(reg, by),
            }
        }
        "embed" => {
            let (blocks, matrix, dim, truncated): (
                Vec<PyRef<'py, PyBlock>>,
                Vec<u8>,
                usize,
                Vec<bool>,
            ) = args.extract()?;
            let values = floats(py, &matrix, "embedding matrix")?;
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
            Op::Embed { items }
        }
        "access" => {
            let deltas = core.take_access_deltas();
            if deltas.is_empty() {
                return Ok(None);
            }
            Op::Access { deltas }
        }
        other => {
            return Err(to_pyerr(
                py,
                CoreError::InvalidArgument(format!("no journal operation {other:?}")),
            ))
        }
    };
    let bytes = encode_entry(origin, &op);
    Ok(Some(PyBytes::new(py, &bytes)))
}

/// Apply one entry through the core's write path. Returns `None`, a runtime id
/// (one written block), a list of ids (many), an index or count (`int`), or the
/// evicted block. A garbage entry raises `RegistryFileError`; a refused
/// operation the usual typed error — the same in every replica.
pub(super) fn apply<'py>(
    reg: &PyRegistry,
    py: Python<'py>,
    entry: &[u8],
    me: &[u8],
) -> PyResult<Bound<'py, PyAny>> {
    let me = origin_id(py, me)?;
    let heavy = entry.len() > 1 << 16;
    let outcome = super::detach_if(py, heavy, || {
        decode_entry(entry).and_then(|(origin, op)| reg.core.apply(origin, op, me))
    })
    .py_err(py)?;
    Ok(match outcome {
        Outcome::Nothing => py.None().into_bound(py),
        Outcome::Id(id) => PyString::new(py, id.encode_hyphenated(&mut [0; 36])).into_any(),
        Outcome::Ids(ids) => {
            PyList::new(py, ids.into_iter().map(BlockId::to_hyphenated))?.into_any()
        }
        Outcome::Index(n) | Outcome::Count(n) => n.into_pyobject(py)?.into_any(),
        Outcome::Evicted(b) => Bound::new(py, PyBlock(Arc::clone(&b), None))?.into_any(),
    })
}
