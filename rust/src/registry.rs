//! The ordered block registry.
//!
//! State is an order (`Arc<Vec<Arc<Block>>>`) plus an id index, behind one
//! `parking_lot::RwLock`. Readers (compile, snapshot, lookups) hold the read lock
//! only long enough to clone an `Arc`; writers copy-on-write the order
//! (`Arc::make_mut`), so a compile result or snapshot that still holds the old
//! order keeps seeing it unchanged.
//!
//! Why a `Vec` and not a linked list or a persistent vector: the hot path is the
//! ordered walk of compile, which a contiguous array of pointers makes as cheap as
//! it gets; reordering is a `rotate` (memmove of pointers, ~25 µs at 100 000
//! blocks). A persistent vector (imbl) would make the first write after a
//! retained compile O(log n) instead of an O(n) pointer copy, at the price of a
//! slower walk and a dependency; registries are walked far more often than they
//! are written while a result is alive.
//!
//! Positions are found by pointer comparison (`Arc::ptr_eq`) over the order, so a
//! lookup by id is O(1) through the index and a position lookup never touches
//! block memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use crate::block::{now_unix, Block, BlockId, IdMap, NewBlock, Source, Wrap, MAX_NAME_BYTES};
use crate::compile::{compile, CompileRequest, GateInput, Order, Selection};
use crate::embeddings::{cosine_gate, dot, normalised, rows_of, Embeddings, GateRows, MatrixView};
use crate::error::{CoreError, Result};
use crate::persist::{append_ids, encode, Entry, SavedRegistry};
use crate::tokens::count_cl100k;

/// registry id -> label, for error messages that name another registry (an
/// author). Entries leave when their registry is dropped.
fn directory() -> &'static RwLock<IdMap<Arc<str>>> {
    static DIRECTORY: OnceLock<RwLock<IdMap<Arc<str>>>> = OnceLock::new();
    DIRECTORY.get_or_init(|| RwLock::new(IdMap::default()))
}

/// Label of a live registry, or its id when it is gone.
pub fn label_of(id: BlockId) -> String {
    known_label(id).unwrap_or_else(|| id.to_hyphenated())
}

/// The label this process knows for registry `id` (a live registry, or an author
/// named by a loaded file): the one id -> label table, which error messages and
/// the façade's provenance report both read.
pub fn known_label(id: BlockId) -> Option<String> {
    directory().read().get(&id).map(|l| l.to_string())
}

/// Where a written block goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    Back,
    Front,
    /// Clamped into `0..=len`.
    At(i64),
}

/// The id index: a hash table of the blocks themselves, keyed by their id.
///
/// `HashMap<BlockId, Arc<Block>>` would store the 16-byte id a second time in
/// every entry; a raw `HashTable` of pointers costs 8 bytes an entry, which keeps
/// the registry within its per-block memory budget (see rust/tests/memory.rs).
#[derive(Default)]
struct Index(hashbrown::HashTable<Arc<Block>>);

impl Index {
    fn get(&self, id: &BlockId) -> Option<&Arc<Block>> {
        self.0.find(id.hash64(), |b| b.id == *id)
    }
    fn contains_key(&self, id: &BlockId) -> bool {
        self.get(id).is_some()
    }
    fn insert(&mut self, block: Arc<Block>) {
        let hash = block.id.hash64();
        match self.0.find_mut(hash, |b| b.id == block.id) {
            Some(slot) => *slot = block,
            None => {
                self.0.insert_unique(hash, block, |b| b.id.hash64());
            }
        }
    }
    fn remove(&mut self, id: &BlockId) {
        if let Ok(entry) = self.0.find_entry(id.hash64(), |b| b.id == *id) {
            entry.remove();
        }
    }
    fn reserve(&mut self, n: usize) {
        self.0.reserve(n, |b| b.id.hash64());
    }
    fn retain(&mut self, mut keep: impl FnMut(&Arc<Block>) -> bool) {
        self.0.retain(|b| keep(b));
    }
}

#[derive(Default)]
struct State {
    order: Order,
    index: Index,
    /// Bumped by every change that can alter a compile's output (order, blocks,
    /// their content, wrap or tokens; not access counts). Lets a binding reuse
    /// the previous prompt while nothing has changed.
    generation: u64,
    emb: Embeddings,
}

impl State {
    fn position(&self, block: &Arc<Block>) -> usize {
        self.order
            .iter()
            .position(|b| Arc::ptr_eq(b, block))
            .expect("index and order hold the same blocks")
    }
}

/// An immutable view of a registry's blocks and order, cheap to take (one `Arc`).
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub registry: BlockId,
    pub order: Order,
    /// Access counts at snapshot time, by position. Blocks are shared with the
    /// live registry, whose compiles keep counting, so the counts are copied:
    /// the one O(n) part of a snapshot (a read per block, no text copied).
    pub access_counts: Vec<u64>,
    pub taken_at: u32,
    /// The embedding matrix as it was (segments shared, copied on write).
    pub embeddings: Embeddings,
}

/// A vector carried in a journal entry, and whether its text was truncated.
pub(crate) type PublishedVector = (Vec<f32>, bool);

/// What a cosine gate reads: the order, the matrix row of each position, the matrix.
type GateInputs = (Order, Arc<GateRows>, MatrixView);

pub struct Registry {
    id: BlockId,
    label: Arc<str>,
    state: RwLock<State>,
    /// Matrix row of every position, for the generation it was built at: a gated
    /// compile of an unchanged registry reads rows from here instead of touching
    /// every block.
    rows: Mutex<Option<(u64, Arc<GateRows>)>>,
    /// Generation at which every block was known to have a vector.
    embedded_at: AtomicU64,
    /// Shared registries only (`None` in a local one): per block, the access
    /// count the journal holds, so a replica publishes only its own compiles'
    /// accesses. Kept beside the blocks, not in them, so a local registry pays
    /// no memory for it.
    published: Mutex<Option<IdMap<u64>>>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        // Only our own entry: a replica that replaced its core (a reload from a
        // checkpoint) has already put the new core's entry under the same id.
        let mut dir = directory().write();
        if dir
            .get(&self.id)
            .is_some_and(|l| Arc::ptr_eq(l, &self.label))
        {
            dir.remove(&self.id);
        }
    }
}

/// Longer texts are counted at write time, outside every lock (and, from the
/// binding, with the GIL released), rather than inside a later compile.
const LAZY_COUNT_MAX: usize = 4096;

fn clamp(pos: i64, len: usize) -> usize {
    pos.clamp(0, len as i64) as usize
}

fn move_index(order: &mut [Arc<Block>], from: usize, to: usize) {
    if from > to {
        order[to..=from].rotate_right(1);
    } else if from < to {
        order[from..=to].rotate_left(1);
    }
}

fn check_priority(p: f64) -> Result<()> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(CoreError::InvalidArgument(format!(
            "priority must be a number in [0, 1], got {p}"
        )))
    }
}

/// The author table of a saved file: the registry itself first, then every
/// other author of `order`, each once, with the label this process knows.
pub(crate) fn authors_of(
    registry: BlockId,
    label: String,
    order: &[Arc<Block>],
) -> Vec<(BlockId, String)> {
    let mut authors = vec![(registry, label)];
    for b in order {
        if !authors.iter().any(|(id, _)| *id == b.author) {
            authors.push((b.author, label_of(b.author)));
        }
    }
    authors
}

/// FNV-1a over a block's name and content: which text a published vector was
/// computed from. Stable across processes and platforms (unlike `text_key`).
pub fn text_hash(b: &Block) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in b.name().bytes().chain([0]).chain(b.content().bytes()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Default eviction score: low priority and rarely emitted blocks go first.
pub fn default_eviction_score(b: &Block) -> f64 {
    0.5 * (1.0 - b.priority) + 0.5 / (b.access_count() as f64 + 1.0)
}

impl Registry {
    pub fn new(label: &str) -> Registry {
        Registry::with_id(label, BlockId::random())
    }

    /// A registry under a given id: the replicas of one shared registry (docs/specification.md §7)
    /// share it, so the blocks it authors are its own in every process.
    pub fn with_id(label: &str, id: BlockId) -> Registry {
        let label: Arc<str> = Arc::from(label);
        directory().write().insert(id, Arc::clone(&label));
        Registry {
            id,
            label,
            state: RwLock::new(State::default()),
            rows: Mutex::new(None),
            embedded_at: AtomicU64::new(u64::MAX),
            published: Mutex::new(None),
        }
    }

    pub fn id(&self) -> BlockId {
        self.id
    }
    pub fn label(&self) -> &str {
        &self.label
    }
    pub fn len(&self) -> usize {
        self.state.read().order.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The write lock with the generation bumped: every writer goes through here.
    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, State> {
        let mut st = self.state.write();
        st.generation += 1;
        st
    }

    /// The current order and its generation, read together.
    pub fn order_and_generation(&self) -> (Order, u64) {
        let st = self.state.read();
        (Arc::clone(&st.order), st.generation)
    }

    /// The block under `id` in `st`, or `BlockNotFound` naming it.
    fn lookup(&self, st: &State, id: BlockId) -> Result<Arc<Block>> {
        st.index
            .get(&id)
            .cloned()
            .ok_or_else(|| self.not_found(&[id]))
    }

    /// Replace the block under `id` by the version `change` builds from it.
    fn change(&self, id: BlockId, change: impl FnOnce(&Block) -> Block) -> Result<()> {
        let mut st = self.write();
        let old = self.lookup(&st, id)?;
        self.replace(&mut st, &old, change(&old));
        Ok(())
    }

    fn not_found(&self, ids: &[BlockId]) -> CoreError {
        CoreError::BlockNotFound {
            registry: self.label.to_string(),
            missing: ids.iter().map(|i| i.to_hyphenated()).collect(),
        }
    }

    fn id_in_use(&self, id: BlockId) -> CoreError {
        CoreError::InvalidArgument(format!(
            "runtime id {} is already in use in registry '{}'",
            id.to_hyphenated(),
            self.label
        ))
    }

    fn describe(b: &Block) -> (String, String) {
        (b.name().to_string(), b.id.to_hyphenated())
    }

    /// The current order: an immutable view that later writes do not change.
    pub fn order(&self) -> Order {
        Arc::clone(&self.state.read().order)
    }

    pub fn get(&self, id: BlockId) -> Result<Arc<Block>> {
        self.lookup(&self.state.read(), id)
    }

    pub fn contains(&self, id: BlockId) -> bool {
        self.state.read().index.contains_key(&id)
    }

    pub fn index_of(&self, id: BlockId) -> Result<usize> {
        let st = self.state.read();
        let b = &self.lookup(&st, id)?;
        Ok(st.position(b))
    }

    /// Validate and build a block. `lazy`: leave a missing token count to the
    /// first compile or read that needs it (single writes); otherwise count now.
    fn prepare(&self, nb: NewBlock, author: BlockId, lazy: bool) -> Result<Block> {
        check_priority(nb.priority)?;
        if nb.name.trim().is_empty() {
            return Err(CoreError::InvalidArgument(
                "semantic_name must be a non-empty string".into(),
            ));
        }
        if let Some(bad) = nb.tags.iter().find(|t| !crate::block::valid_tag(t)) {
            return Err(CoreError::InvalidArgument(format!(
                "tag {bad:?} is empty or holds the control character U+001F"
            )));
        }
        if nb.name.len() > MAX_NAME_BYTES {
            return Err(CoreError::InvalidArgument(format!(
                "semantic_name is {} bytes long; at most {MAX_NAME_BYTES} are allowed",
                nb.name.len()
            )));
        }
        if nb.tags.iter().map(|t| t.len() + 1).sum::<usize>() > MAX_NAME_BYTES {
            return Err(CoreError::InvalidArgument(format!(
                "tags take more than {MAX_NAME_BYTES} bytes together"
            )));
        }
        if nb.name.len() + nb.content.len() + nb.tags.iter().map(|t| t.len() + 1).sum::<usize>()
            > u32::MAX as usize
        {
            return Err(CoreError::InvalidArgument(
                "block text is larger than 4 GiB".into(),
            ));
        }
        let tokens = match nb.token_count {
            None if !lazy || nb.content.len() > LAZY_COUNT_MAX => Some(count_cl100k(&nb.content)),
            t => t,
        };
        Ok(Block::build(nb, author, tokens))
    }

    /// Insert one block. A short text written without a token count is counted
    /// when a compile first reaches it: a coordination write costs no counting,
    /// and a block evicted or rolled back unseen never pays for it.
    pub fn insert(&self, mut nb: NewBlock, author: BlockId, position: Position) -> Result<BlockId> {
        let vector = nb.embedding.take();
        let block = Arc::new(self.prepare(nb, author, true)?);
        let id = block.id;
        let mut st = self.write();
        if st.index.contains_key(&id) {
            return Err(self.id_in_use(id));
        }
        if let Some(v) = &vector {
            st.emb.check_dim(v.len(), "embedding", &self.label)?;
            st.emb.attach(&block, v, false)?;
        }
        let len = st.order.len();
        let at = match position {
            Position::Back => len,
            Position::Front => 0,
            Position::At(p) => clamp(p, len),
        };
        st.index.insert(Arc::clone(&block));
        Arc::make_mut(&mut st.order).insert(at, block);
        Ok(id)
    }

    /// Append many blocks at once: all are validated first, so either every block
    /// goes in or none does.
    pub fn insert_many(&self, blocks: Vec<NewBlock>, author: BlockId) -> Result<Vec<BlockId>> {
        let mut vectors = Vec::new();
        let built: Vec<Arc<Block>> = blocks
            .into_iter()
            .map(|mut nb| {
                vectors.push(nb.embedding.take());
                self.prepare(nb, author, false).map(Arc::new)
            })
            .collect::<Result<_>>()?;
        let ids: Vec<BlockId> = built.iter().map(|b| b.id).collect();
        let mut seen = IdMap::default();
        if let Some(dup) = ids.iter().find(|id| seen.insert(**id, ()).is_some()) {
            return Err(self.id_in_use(*dup));
        }
        let mut st = self.write();
        if let Some(dup) = ids.iter().find(|id| st.index.contains_key(id)) {
            return Err(self.id_in_use(*dup));
        }
        // Check every vector before anything changes: all or nothing.
        if let Some(v) = vectors.iter().flatten().next() {
            st.emb.check_dim(v.len(), "embedding", &self.label)?;
            if vectors.iter().flatten().any(|w| w.len() != v.len()) {
                return Err(CoreError::InvalidArgument(
                    "embeddings of one insert differ in length".into(),
                ));
            }
        }
        for (b, v) in built.iter().zip(&vectors) {
            if let Some(v) = v {
                st.emb.attach(b, v, false)?;
            }
        }
        st.index.reserve(built.len());
        for b in &built {
            st.index.insert(Arc::clone(b));
        }
        Arc::make_mut(&mut st.order).extend(built);
        Ok(ids)
    }

    // ---- promote --------------------------------------------------------------

    fn relocate(
        &self,
        id: BlockId,
        target: impl FnOnce(&State, usize) -> Result<usize>,
    ) -> Result<usize> {
        let mut st = self.write();
        let b = &self.lookup(&st, id)?;
        let from = st.position(b);
        let to = target(&st, from)?;
        move_index(Arc::make_mut(&mut st.order).as_mut_slice(), from, to);
        Ok(to)
    }

    /// Move to `position` (clamped); returns the new index.
    pub fn move_to(&self, id: BlockId, position: i64) -> Result<usize> {
        self.relocate(id, |st, _| Ok(clamp(position, st.order.len() - 1)))
    }

    /// Move `steps` toward the front (negative: toward the back), clamped.
    pub fn move_by(&self, id: BlockId, steps: i64) -> Result<usize> {
        self.relocate(id, |st, from| {
            Ok(clamp(
                (from as i64).saturating_sub(steps),
                st.order.len() - 1,
            ))
        })
    }

    /// Move directly before (`after == false`) or after `anchor`.
    pub fn move_next_to(&self, id: BlockId, anchor: BlockId, after: bool) -> Result<usize> {
        self.relocate(id, |st, from| {
            let a = st
                .index
                .get(&anchor)
                .ok_or_else(|| self.not_found(&[anchor]))?;
            let mut at = st.position(a);
            if at == from {
                return Ok(from);
            }
            // Index of the anchor once `id` has left its place.
            if from < at {
                at -= 1;
            }
            Ok(if after { at + 1 } else { at })
        })
    }

    fn distinct(&self, ids: &[BlockId], st: &State) -> Result<Vec<Arc<Block>>> {
        let mut seen = IdMap::default();
        for (k, id) in ids.iter().enumerate() {
            if let Some(first) = seen.insert(*id, k) {
                return Err(CoreError::InvalidArgument(format!(
                    "block {} is listed twice (positions {first} and {k})",
                    id.to_hyphenated()
                )));
            }
        }
        let missing: Vec<BlockId> = ids
            .iter()
            .filter(|i| !st.index.contains_key(i))
            .copied()
            .collect();
        if !missing.is_empty() {
            return Err(self.not_found(&missing));
        }
        Ok(ids
            .iter()
            .filter_map(|i| st.index.get(i).cloned())
            .collect())
    }

    /// Move `ids` as one contiguous unit, in the given order, to `position`
    /// (clamped among the blocks that stay). Returns the unit's first index.
    pub fn promote_group(&self, ids: &[BlockId], position: i64) -> Result<usize> {
        let mut st = self.write();
        let group = self.distinct(ids, &st)?;
        let order = Arc::make_mut(&mut st.order);
        let members: std::collections::HashSet<*const Block> =
            group.iter().map(Arc::as_ptr).collect();
        order.retain(|b| !members.contains(&Arc::as_ptr(b)));
        let at = clamp(position, order.len());
        order.splice(at..at, group);
        Ok(at)
    }

    /// The listed blocks move to the front in the given order; the rest keep
    /// their relative order.
    pub fn reorder(&self, ids: &[BlockId]) -> Result<()> {
        self.promote_group(ids, 0).map(|_| ())
    }

    // ---- write / change -------------------------------------------------------

    fn replace(&self, st: &mut State, old: &Arc<Block>, new: Block) {
        if new.row() != old.row() {
            st.emb.release(old);
        }
        let new = Arc::new(new);
        let at = st.position(old);
        Arc::make_mut(&mut st.order)[at] = Arc::clone(&new);
        st.index.insert(new);
    }

    pub fn update_priority(&self, id: BlockId, priority: f64) -> Result<()> {
        check_priority(priority)?;
        self.change(id, |old| old.with_priority(priority))
    }

    /// `gated == false`: the relevance gate never removes the block (docs/specification.md §8).
    pub fn set_gated(&self, id: BlockId, gated: bool) -> Result<()> {
        self.change(id, |old| old.with_gated(gated))
    }

    /// `wrap == None` removes the decoration.
    pub fn set_wrap(&self, id: BlockId, wrap: Option<Wrap>) -> Result<()> {
        self.change(id, |old| old.with_wrap(wrap))
    }

    /// Replace an agent block's content. `actor` is the registry acting; it must
    /// be the block's author.
    pub fn update_content(
        &self,
        id: BlockId,
        content: &str,
        token_count: Option<u32>,
        actor: BlockId,
    ) -> Result<()> {
        let old = self.get(id)?;
        self.check_content_change(&old, actor)?;
        // Count outside the lock; the block is re-checked under it.
        let tokens = token_count.unwrap_or_else(|| count_cl100k(content));
        let mut st = self.write();
        let current = self.lookup(&st, id)?;
        self.check_content_change(&current, actor)?;
        self.replace(&mut st, &current, current.with_content(content, tokens));
        Ok(())
    }

    fn check_content_change(&self, b: &Block, actor: BlockId) -> Result<()> {
        let (name, id) = Self::describe(b);
        let registry = self.label.to_string();
        match b.source {
            Source::Seed => Err(CoreError::SeedMutation { registry, name, id }),
            Source::Orchestrator => Err(CoreError::OrchestratorMutation { registry, name, id }),
            Source::Agent if b.author != actor => Err(CoreError::Permission(format!(
                "registry '{}' may not change block '{name}' ({id}) in registry '{registry}': \
                 it was written by registry '{}'",
                label_of(actor),
                label_of(b.author)
            ))),
            Source::Agent => Ok(()),
        }
    }

    // ---- evict ----------------------------------------------------------------

    fn check_evict(&self, b: &Block, force: bool, actor: BlockId) -> Result<()> {
        if b.evictable {
            return Ok(());
        }
        let (name, id) = Self::describe(b);
        if !force {
            return Err(CoreError::Eviction {
                registry: self.label.to_string(),
                name,
                id,
                author: label_of(b.author),
            });
        }
        if actor != b.author {
            return Err(CoreError::Permission(format!(
                "registry '{}' may not force-evict block '{name}' ({id}) from registry '{}': \
                 only its author, registry '{}', may",
                label_of(actor),
                self.label,
                label_of(b.author)
            )));
        }
        Ok(())
    }

    /// Remove one block under the permission model; returns it.
    pub fn evict(&self, id: BlockId, force: bool, actor: BlockId) -> Result<Arc<Block>> {
        let mut st = self.write();
        let b = self.lookup(&st, id)?;
        self.check_evict(&b, force, actor)?;
        let at = st.position(&b);
        Arc::make_mut(&mut st.order).remove(at);
        st.index.remove(&id);
        st.emb.release(&b);
        Ok(b)
    }

    fn remove_where(st: &mut State, doomed: &std::collections::HashSet<*const Block>) {
        if doomed.is_empty() {
            return;
        }
        let State {
            order, index, emb, ..
        } = st;
        Arc::make_mut(order).retain(|b| {
            let keep = !doomed.contains(&Arc::as_ptr(b));
            if !keep {
                emb.release(b);
            }
            keep
        });
        index.retain(|b| !doomed.contains(&Arc::as_ptr(b)));
    }

    /// A caller's eviction policy, decided: `scored` pairs blocks (in the order
    /// the policy saw them) with its scores. Under one write lock, the blocks
    /// still present and evictable are ranked (highest score first, ties in the
    /// given order), cut by `threshold` and `limit`, and removed. Blocks another
    /// thread (or replica) removed meanwhile are skipped, not an error, so a
    /// policy never fails half-way. Returns the removed ids, ranked.
    pub fn evict_scored(
        &self,
        scored: &[(BlockId, f64)],
        limit: Option<usize>,
        threshold: Option<f64>,
    ) -> Result<Vec<BlockId>> {
        if let Some((id, _)) = scored.iter().find(|(_, s)| s.is_nan()) {
            return Err(CoreError::InvalidArgument(format!(
                "eviction policy score for block {} is NaN",
                id.to_hyphenated()
            )));
        }
        let mut st = self.write();
        let candidates: Vec<(f64, usize, Arc<Block>)> = scored
            .iter()
            .enumerate()
            .filter_map(|(k, (id, s))| {
                st.index
                    .get(id)
                    .filter(|b| b.evictable)
                    .map(|b| (*s, k, Arc::clone(b)))
            })
            .collect();
        Ok(Self::evict_ranked(&mut st, candidates, limit, threshold))
    }

    /// Every evictable block with its default-policy score, registry order: what
    /// a default `evict_by_policy` decides on (then journaled as decided, since
    /// the access counts behind it are this process's).
    pub fn default_eviction_scores(&self) -> Vec<(BlockId, f64)> {
        self.order()
            .iter()
            .filter(|b| b.evictable)
            .map(|b| (b.id, default_eviction_score(b)))
            .collect()
    }

    /// Rank evictable blocks by the default policy (highest score first, ties in
    /// registry order) and remove the first `limit` of them (all when `None`)
    /// whose score is at least `threshold`. Returns the removed ids, ranked.
    pub fn evict_by_policy(&self, limit: Option<usize>, threshold: Option<f64>) -> Vec<BlockId> {
        let mut st = self.write();
        let scored: Vec<(f64, usize, Arc<Block>)> = st
            .order
            .iter()
            .enumerate()
            .filter(|(_, b)| b.evictable)
            .map(|(i, b)| (default_eviction_score(b), i, Arc::clone(b)))
            .collect();
        Self::evict_ranked(&mut st, scored, limit, threshold)
    }

    /// Rank `scored` (score, tie-break order, block) highest score first, keep
    /// those at or above `threshold`, the first `limit` of them, and remove them.
    /// Returns their ids, ranked. The one ranking of every eviction policy.
    fn evict_ranked(
        st: &mut State,
        mut ranked: Vec<(f64, usize, Arc<Block>)>,
        limit: Option<usize>,
        threshold: Option<f64>,
    ) -> Vec<BlockId> {
        ranked.retain(|(s, _, _)| threshold.is_none_or(|t| *s >= t));
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        // A block listed twice (a caller's scores) counts once, at its best rank.
        let mut seen = IdMap::default();
        ranked.retain(|(_, _, b)| seen.insert(b.id, ()).is_none());
        ranked.truncate(limit.unwrap_or(usize::MAX));
        let doomed = ranked.iter().map(|(_, _, b)| Arc::as_ptr(b)).collect();
        Self::remove_where(st, &doomed);
        ranked.into_iter().map(|(_, _, b)| b.id).collect()
    }

    // ---- rollback -------------------------------------------------------------

    /// Remove the agent blocks of one run that `actor` wrote (an author
    /// retracting its own writes, so `evictable` does not protect them). Seed
    /// and orchestrator blocks, and blocks written by other registries, stay.
    pub fn rollback_trajectory(&self, trajectory: &str, actor: BlockId) -> usize {
        let mut st = self.write();
        let doomed: std::collections::HashSet<*const Block> = st
            .order
            .iter()
            .filter(|b| {
                b.source == Source::Agent && b.author == actor && b.trajectory() == Some(trajectory)
            })
            .map(Arc::as_ptr)
            .collect();
        let n = doomed.len();
        Self::remove_where(&mut st, &doomed);
        n
    }

    pub fn snapshot(&self) -> Snapshot {
        let (order, embeddings) = {
            let st = self.state.read();
            (Arc::clone(&st.order), st.emb.clone())
        };
        let access_counts = order.iter().map(|b| b.access_count()).collect();
        Snapshot {
            registry: self.id,
            order,
            access_counts,
            taken_at: now_unix(),
            embeddings,
        }
    }

    /// Put back the blocks, order and metadata of `snap`, each under a **new**
    /// runtime id (authors are kept, so ownership survives) and with the access
    /// counts it recorded, within what `actor` may touch (see `restore_blocks`).
    pub fn restore(&self, snap: &Snapshot, actor: BlockId) -> Result<()> {
        let new_ids = (0..snap.order.len()).map(|_| BlockId::random()).collect();
        self.restore_as(snap, new_ids, actor)
    }

    /// `restore` under the given new ids (drawn by whoever decided the restore).
    pub fn restore_as(&self, snap: &Snapshot, new_ids: Vec<BlockId>, actor: BlockId) -> Result<()> {
        self.check_snapshot_of(snap.registry)?;
        let entries = snap
            .order
            .iter()
            .zip(&snap.access_counts)
            .map(|(b, &n)| (Arc::clone(b), n))
            .collect();
        self.restore_blocks(entries, new_ids, Some(&snap.embeddings), None, actor)
    }

    pub(crate) fn check_snapshot_of(&self, registry: BlockId) -> Result<()> {
        if registry != self.id {
            return Err(CoreError::InvalidArgument(format!(
                "snapshot was taken of registry '{}', not of registry '{}'",
                label_of(registry),
                self.label
            )));
        }
        Ok(())
    }

    /// Whether `actor` may not touch `b` in a restore: a block pinned
    /// (`evictable == false`) by another registry. The receiver of such a block
    /// can neither evict it nor bring it back once its author evicted it, so a
    /// snapshot must not do either (it would be a capability bypass).
    fn pinned_against(b: &Block, actor: BlockId) -> bool {
        !b.evictable && b.author != actor
    }

    /// The one restore path (local snapshots and journal replays). `entries` are
    /// the snapshot's blocks (old ids) with their access counts; `new_ids` the
    /// ids the restored blocks take, by position. `snap_emb`: the snapshot's
    /// matrix (local restore, rows shared); `vectors`: per entry, a vector to
    /// attach instead (journal replay).
    ///
    /// The permission rows (docs/coordination.md): blocks pinned against `actor`
    /// are untouched — one present now stays, with its id, version and
    /// vector (at its snapshot position when the snapshot held it, else at the
    /// front in its current order); one the snapshot held that is gone now (its
    /// author evicted it) is not brought back. Everything else is put back as the
    /// snapshot had it, under the new ids, and blocks written since go.
    pub(crate) fn restore_blocks(
        &self,
        entries: Vec<(Arc<Block>, u64)>,
        new_ids: Vec<BlockId>,
        snap_emb: Option<&Embeddings>,
        vectors: Option<Vec<Option<PublishedVector>>>,
        actor: BlockId,
    ) -> Result<()> {
        if new_ids.len() != entries.len() {
            return Err(CoreError::InvalidArgument(format!(
                "restore got {} new ids for {} blocks",
                new_ids.len(),
                entries.len()
            )));
        }
        let mut st = self.write();
        let mut emb = match snap_emb {
            Some(e) => e.clone(),
            None => Embeddings::default(),
        };
        if let Some(v) = vectors.iter().flatten().flatten().next() {
            emb.check_dim(v.0.len(), "embedding", &self.label)?;
        }
        let in_snapshot: IdMap<()> = entries.iter().map(|(b, _)| (b.id, ())).collect();
        // Pinned blocks present now and not in the snapshot: kept, at the front.
        let mut order: Vec<Arc<Block>> = st
            .order
            .iter()
            .filter(|b| Self::pinned_against(b, actor) && !in_snapshot.contains_key(&b.id))
            .cloned()
            .collect();
        let mut keep_vectors: Vec<Arc<Block>> = order.clone();
        let mut seen = IdMap::default();
        for (k, ((b, n), new_id)) in entries.iter().zip(&new_ids).enumerate() {
            if Self::pinned_against(b, actor) {
                if let Some(current) = st.index.get(&b.id) {
                    order.push(Arc::clone(current));
                    keep_vectors.push(Arc::clone(current));
                }
                continue;
            }
            if seen.insert(*new_id, ()).is_some() || st.index.contains_key(new_id) {
                return Err(self.id_in_use(*new_id));
            }
            let nb = b.with_new_id(*new_id, *n);
            match vectors.as_ref().and_then(|v| v[k].as_ref()) {
                Some((v, truncated)) => {
                    nb.set_row(None, false);
                    emb.attach(&nb, v, *truncated)?;
                }
                // A vector attached after the snapshot was taken is not in the
                // snapshot's matrix: the block is embedded again when gated.
                None if nb.row().is_some_and(|r| !emb.owns(r, &nb)) => nb.set_row(None, false),
                None => {}
            }
            order.push(Arc::new(nb));
        }
        // Kept blocks move their vectors into the restored matrix (new rows).
        for b in &keep_vectors {
            if let Some(v) = st.emb.vector(b).map(<[f32]>::to_vec) {
                let truncated = b.truncated();
                emb.attach(b, &v, truncated)?;
            }
        }
        let mut index = Index::default();
        index.reserve(order.len());
        for b in &order {
            index.insert(Arc::clone(b));
        }
        let generation = st.generation;
        *st = State {
            order: Arc::new(order),
            index,
            generation,
            emb,
        };
        Ok(())
    }

    // ---- compile --------------------------------------------------------------

    /// Run the compile pipeline (`compile::compile`) over the current order, or
    /// over `view` (the order a gate scored).
    pub fn compile(&self, view: Option<Order>, req: CompileRequest) -> Result<Selection> {
        compile(view.unwrap_or_else(|| self.order()), req)
    }

    // ---- persistence ----------------------------------------------------------

    /// The whole registry as one file's bytes (see `persist.rs`).
    pub fn save_bytes(&self, settings: &str) -> Vec<u8> {
        self.save_state(&self.state.read(), settings, None)
    }

    fn save_state(&self, st: &State, settings: &str, published: Option<&IdMap<u64>>) -> Vec<u8> {
        let authors = authors_of(self.id, self.label.to_string(), &st.order);
        let entries: Vec<Entry<'_>> = st
            .order
            .iter()
            .map(|b| Entry {
                block: b,
                // A checkpoint holds what the journal holds: this replica's
                // unpublished accesses go out in its next access entry, and
                // counting them here too would count them twice.
                access: published
                    .and_then(|p| p.get(&b.id).copied())
                    .unwrap_or_else(|| b.access_count()),
                vector: st.emb.vector(b),
            })
            .collect();
        encode(
            self.id,
            &self.label,
            settings,
            st.emb.dim(),
            &authors,
            &entries,
        )
    }

    /// Fill an empty registry from a decoded file: new runtime ids; blocks the
    /// saved registry wrote are this registry's now, other authors keep their
    /// ids (no object here can claim them) and their labels for messages.
    pub fn install(&self, saved: SavedRegistry) -> Result<usize> {
        self.install_as(saved, None)
    }

    /// `install`, keeping the given runtime ids (a shared registry's checkpoint:
    /// the replicas of one registry share ids, docs/specification.md §7).
    pub fn install_as(&self, saved: SavedRegistry, ids: Option<Vec<BlockId>>) -> Result<usize> {
        self.install_into(saved, ids, false)
    }

    /// A shared registry's checkpoint in place of everything this replica holds
    /// (it met a gap in the journal that the checkpoint covers). The registry
    /// object stays the same, so nothing that holds it sees a swap.
    pub fn reset_to(&self, saved: SavedRegistry, ids: Vec<BlockId>) -> Result<usize> {
        self.install_into(saved, Some(ids), true)
    }

    fn install_into(
        &self,
        saved: SavedRegistry,
        ids: Option<Vec<BlockId>>,
        replace: bool,
    ) -> Result<usize> {
        if let Some(ids) = &ids {
            if ids.len() != saved.blocks.len() {
                return Err(CoreError::Corrupt(format!(
                    "checkpoint lists {} ids for {} blocks",
                    ids.len(),
                    saved.blocks.len()
                )));
            }
            let mut seen = IdMap::default();
            if let Some(dup) = ids.iter().find(|id| seen.insert(**id, ()).is_some()) {
                return Err(CoreError::Corrupt(format!(
                    "checkpoint lists runtime id {} twice",
                    dup.to_hyphenated()
                )));
            }
        }
        let keep_ids = ids.is_some();
        let mut ids = ids.map(Vec::into_iter);
        {
            let mut dir = directory().write();
            for (id, label) in &saved.authors {
                if *id != saved.registry && !dir.contains_key(id) {
                    dir.insert(*id, Arc::from(label.as_str()));
                }
            }
        }
        let mut built = Vec::with_capacity(saved.blocks.len());
        let mut vectors = Vec::with_capacity(saved.blocks.len());
        for mut sb in saved.blocks {
            let author = if sb.author == saved.registry {
                self.id
            } else {
                sb.author
            };
            vectors.push(sb.block.embedding.take().map(|v| (v, sb.truncated)));
            sb.block.id = ids.as_mut().and_then(Iterator::next);
            let tokens = sb.block.token_count.unwrap_or(0);
            built.push(Arc::new(Block::restored(
                sb.block,
                author,
                tokens,
                sb.created_at,
                sb.access,
                sb.wrap,
            )));
        }
        let mut st = self.write();
        if !replace && !st.order.is_empty() {
            return Err(CoreError::InvalidArgument(format!(
                "registry '{}' is not empty: a saved registry loads into a new one",
                self.label
            )));
        }
        // Built aside and swapped in whole: a vector that does not fit leaves
        // the registry as it was.
        let mut fresh = State {
            generation: st.generation,
            ..State::default()
        };
        fresh.emb.set_quantised(st.emb.quantised());
        fresh.index.reserve(built.len());
        for (b, v) in built.iter().zip(&vectors) {
            if let Some((v, truncated)) = v {
                fresh.emb.attach(b, v, *truncated)?;
            }
            fresh.index.insert(Arc::clone(b));
        }
        let n = built.len();
        let published: Vec<(BlockId, u64)> = if keep_ids {
            built.iter().map(|b| (b.id, b.access_count())).collect()
        } else {
            Vec::new()
        };
        fresh.order = Arc::new(built);
        *st = fresh;
        if replace {
            *self.published.lock() = None;
        }
        if keep_ids {
            // A checkpoint: the counts it holds are the journal's.
            self.note_published(published);
        }
        Ok(n)
    }

    /// The whole registry as a shared registry's checkpoint: the `save` bytes
    /// followed by every block's runtime id, in order, and their count.
    pub fn checkpoint_bytes(&self, settings: &str) -> Vec<u8> {
        let st = self.state.read();
        let published = self.published.lock();
        let mut out = self.save_state(&st, settings, published.as_ref());
        append_ids(&mut out, st.order.iter().map(|b| b.id));
        out
    }

    // ---- access counts of shared registries -----------------------------------

    /// Record what the journal already holds of these blocks' access counts
    /// (blocks a journal entry or checkpoint just brought in): accesses beyond
    /// it are this replica's own, still to publish.
    pub fn note_published(&self, counts: impl IntoIterator<Item = (BlockId, u64)>) {
        self.published
            .lock()
            .get_or_insert_with(IdMap::default)
            .extend(counts);
    }

    /// Per block, the accesses counted here and not yet published (then marked
    /// published); blocks with none are left out. Registry order. Empty for a
    /// local registry, which never noted anything as published.
    pub fn take_access_deltas(&self) -> Vec<(BlockId, u64)> {
        let order = self.order();
        let mut guard = self.published.lock();
        let Some(published) = guard.as_mut() else {
            return Vec::new();
        };
        let mut deltas = Vec::new();
        // Rebuilt from the current order, so evicted blocks leave the table.
        let mut now = IdMap::default();
        for b in order.iter() {
            let total = b.access_count();
            let known = published.get(&b.id).copied().unwrap_or(total);
            if total > known {
                deltas.push((b.id, total - known));
            }
            now.insert(b.id, total);
        }
        *published = now;
        deltas
    }

    /// Add accesses another replica counted and published (blocks gone
    /// meanwhile are skipped).
    pub fn add_accesses(&self, deltas: &[(BlockId, u64)]) {
        let st = self.state.read();
        let mut guard = self.published.lock();
        let published = guard.get_or_insert_with(IdMap::default);
        for (id, n) in deltas {
            if let Some(b) = st.index.get(id) {
                b.add_accesses(*n);
                *published.entry(*id).or_insert(0) += *n;
            }
        }
    }

    /// Store vectors another replica computed, each for the text it was computed
    /// from (`text_hash`); a block whose content changed or which is gone is
    /// skipped. All vectors are checked first. Returns how many were stored.
    pub fn attach_published(&self, items: &[(BlockId, u64, bool, Vec<f32>)]) -> Result<usize> {
        let mut st = self.write();
        if let Some((_, _, _, v)) = items.first() {
            st.emb.check_dim(v.len(), "embedding", &self.label)?;
            if items.iter().any(|(_, _, _, w)| w.len() != v.len()) {
                return Err(CoreError::InvalidArgument(
                    "vectors of one journal entry differ in length".into(),
                ));
            }
        }
        let mut stored = 0;
        for (id, hash, truncated, v) in items {
            let Some(b) = st.index.get(id).cloned() else {
                continue;
            };
            if text_hash(&b) != *hash {
                continue;
            }
            st.emb.attach(&b, v, *truncated)?;
            stored += 1;
        }
        Ok(stored)
    }

    // ---- embeddings and the cosine gate --------------------------------------

    /// Blocks with no vector yet, in registry order (empty, at the cost of one
    /// comparison, while nothing changed since every block had one).
    pub fn unembedded(&self) -> Vec<Arc<Block>> {
        let (order, generation) = self.order_and_generation();
        if self.embedded_at.load(Ordering::Acquire) == generation {
            return Vec::new();
        }
        let missing: Vec<Arc<Block>> = order
            .iter()
            .filter(|b| b.row().is_none())
            .cloned()
            .collect();
        if missing.is_empty() {
            self.embedded_at.store(generation, Ordering::Release);
        }
        missing
    }

    /// Store vectors computed for `blocks` (as `unembedded` returned them). A
    /// block whose text changed or which left meanwhile is skipped: its new text
    /// shows up in the next `unembedded`. All vectors are checked first. Returns
    /// how many were stored.
    pub fn attach_embeddings(&self, items: &[(Arc<Block>, &[f32], bool)]) -> Result<usize> {
        let mut st = self.write();
        if let Some((_, v, _)) = items.first() {
            st.emb.check_dim(v.len(), "embedding", &self.label)?;
            if let Some((b, w, _)) = items.iter().find(|(_, w, _)| w.len() != v.len()) {
                return Err(CoreError::InvalidArgument(format!(
                    "embedding of block '{}' has {} dimensions, the first has {}",
                    b.name(),
                    w.len(),
                    v.len()
                )));
            }
        }
        let mut stored = 0;
        for (b, v, truncated) in items {
            let current = match st.index.get(&b.id) {
                Some(c) if c.text_key() == b.text_key() => Arc::clone(c),
                _ => continue,
            };
            st.emb.attach(&current, v, *truncated)?;
            stored += 1;
        }
        Ok(stored)
    }

    /// Replace the vector of one block (an explicit, precomputed embedding).
    pub fn set_embedding(&self, id: BlockId, v: &[f32]) -> Result<()> {
        let mut st = self.write();
        let b = self.lookup(&st, id)?;
        st.emb.check_dim(v.len(), "embedding", &self.label)?;
        st.emb.attach(&b, v, false)
    }

    /// The stored vector of `block` (this version's text), if any.
    pub fn embedding_of(&self, block: &Block) -> Option<Vec<f32>> {
        self.state.read().emb.vector(block).map(<[f32]>::to_vec)
    }

    /// (dimension, rows in use, bytes held, quantised).
    pub fn embedding_stats(&self) -> (usize, usize, usize, bool) {
        let st = self.state.read();
        let e = &st.emb;
        (e.dim(), e.rows_in_use(), e.bytes(), e.quantised())
    }

    /// Keep an int8 copy of the matrix for faster gating (results unchanged).
    pub fn set_quantised(&self, on: bool) {
        self.state.write().emb.set_quantised(on);
    }

    /// The order, the row of each position and the matrix, read together;
    /// `Ok(None)` when some block has no vector yet.
    fn gate_inputs(&self, q: &[f32]) -> Result<Option<GateInputs>> {
        let (order, generation, view) = {
            let st = self.state.read();
            if !st.order.is_empty() {
                st.emb.check_dim(q.len(), "task embedding", &self.label)?;
            }
            (Arc::clone(&st.order), st.generation, st.emb.view())
        };
        if order.is_empty() {
            return Ok(Some((
                order,
                Arc::new(GateRows {
                    rows: Vec::new(),
                    ungated: Vec::new(),
                }),
                view,
            )));
        }
        let cached = self
            .rows
            .lock()
            .as_ref()
            .and_then(|(g, rows)| (*g == generation).then(|| Arc::clone(rows)));
        let rows = match cached {
            Some(rows) => rows,
            None => match rows_of(&order) {
                Ok(rows) => {
                    let rows = Arc::new(rows);
                    *self.rows.lock() = Some((generation, Arc::clone(&rows)));
                    rows
                }
                Err(_) => return Ok(None),
            },
        };
        Ok(Some((order, rows, view)))
    }

    /// The cosine gate's decision for query `q` (stage 1 of a compile), with the
    /// order it was taken on. `Ok(None)`: some block has no vector yet (embed
    /// `unembedded()`, retry).
    pub fn cosine_admission(
        &self,
        q: &[f32],
        threshold: Option<f64>,
        top_k: Option<usize>,
    ) -> Result<Option<(Order, GateInput)>> {
        let q = &normalised(q);
        let Some((order, rows, view)) = self.gate_inputs(q)? else {
            return Ok(None);
        };
        let scored = cosine_gate(&view, &rows, q, threshold, top_k, true);
        let gate = GateInput::Decided {
            admitted: scored.admitted,
            scores: scored.scores,
        };
        Ok(Some((order, gate)))
    }

    /// Blocks by cosine score against `q`, descending, ties in registry order,
    /// cut by `threshold` and `top_k`. `Ok(None)` as for `cosine_admission`.
    #[allow(clippy::type_complexity)]
    pub fn rank(
        &self,
        q: &[f32],
        top_k: Option<usize>,
        threshold: Option<f64>,
    ) -> Result<Option<Vec<(Arc<Block>, f64)>>> {
        let q = &normalised(q);
        let Some((order, rows, view)) = self.gate_inputs(q)? else {
            return Ok(None);
        };
        let scored = cosine_gate(&view, &rows, q, threshold, top_k, false);
        let mut out: Vec<(usize, f64)> = scored
            .admitted
            .iter()
            .enumerate()
            .filter(|(_, a)| **a)
            .map(|(i, _)| (i, scored.scores[i]))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(Some(
            out.into_iter()
                .map(|(i, s)| (Arc::clone(&order[i]), s))
                .collect(),
        ))
    }

    /// Cosine score of one block against `q` (`None`: no vector yet).
    pub fn score(&self, id: BlockId, q: &[f32]) -> Result<Option<f64>> {
        let st = self.state.read();
        let b = self.lookup(&st, id)?;
        st.emb.check_dim(q.len(), "task embedding", &self.label)?;
        Ok(st.emb.vector(&b).map(|v| f64::from(dot(v, &normalised(q)))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg_with(n: usize) -> (Registry, Vec<BlockId>) {
        let r = Registry::new("test");
        let ids = (0..n)
            .map(|i| {
                let mut nb = NewBlock::new(format!("b{i}"), format!("content {i}"));
                nb.token_count = Some(10);
                r.insert(nb, r.id(), Position::Back).unwrap()
            })
            .collect();
        (r, ids)
    }

    fn req(budget: Option<u64>, sep_tokens: u32) -> CompileRequest {
        CompileRequest {
            budget,
            sep_tokens,
            tools_in_prompt: true,
            ..CompileRequest::default()
        }
    }

    fn names(r: &Registry) -> Vec<String> {
        r.order().iter().map(|b| b.name().to_string()).collect()
    }

    #[test]
    fn single_writes_count_tokens_when_first_needed() {
        let r = Registry::new("lazy");
        let text = "Review the diff for security issues first.";
        let id = r
            .insert(NewBlock::new("plan", text), r.id(), Position::Front)
            .unwrap();
        let b = r.get(id).unwrap();
        assert_eq!(
            b.token_count.load(Ordering::Relaxed),
            u32::MAX,
            "not counted yet"
        );
        let sel = r.compile(None, req(Some(1000), 1)).unwrap();
        assert_eq!(sel.total_tokens, u64::from(count_cl100k(text)));
        assert_eq!(b.token_count(), count_cl100k(text));
        // A new version of the same text keeps the count; new content is counted at once.
        r.update_priority(id, 0.9).unwrap();
        assert_eq!(r.get(id).unwrap().token_count(), count_cl100k(text));
        let long = "word ".repeat(2000);
        let id2 = r
            .insert(NewBlock::new("long", long.clone()), r.id(), Position::Back)
            .unwrap();
        let b2 = r.get(id2).unwrap();
        assert_eq!(b2.token_count.load(Ordering::Relaxed), count_cl100k(&long));
    }

    #[test]
    fn ordering_directives_clamp() {
        let (r, ids) = reg_with(4);
        assert_eq!(r.move_to(ids[3], 0).unwrap(), 0);
        assert_eq!(names(&r), ["b3", "b0", "b1", "b2"]);
        assert_eq!(r.move_to(ids[3], 99).unwrap(), 3);
        assert_eq!(r.move_by(ids[3], 2).unwrap(), 1);
        assert_eq!(r.move_by(ids[3], -10).unwrap(), 3);
        assert_eq!(r.move_by(ids[3], 100).unwrap(), 0);
        assert_eq!(r.move_next_to(ids[0], ids[2], true).unwrap(), 3);
        assert_eq!(names(&r), ["b3", "b1", "b2", "b0"]);
        assert_eq!(r.move_next_to(ids[0], ids[1], false).unwrap(), 1);
        assert_eq!(names(&r), ["b3", "b0", "b1", "b2"]);
    }

    #[test]
    fn group_promote_keeps_given_order() {
        let (r, ids) = reg_with(6);
        assert_eq!(r.promote_group(&[ids[4], ids[1], ids[5]], 1).unwrap(), 1);
        assert_eq!(names(&r), ["b0", "b4", "b1", "b5", "b2", "b3"]);
        assert!(r.promote_group(&[ids[0], ids[0]], 0).is_err());
        assert_eq!(
            names(&r),
            ["b0", "b4", "b1", "b5", "b2", "b3"],
            "failed op changes nothing"
        );
        r.reorder(&[ids[3], ids[2]]).unwrap();
        assert_eq!(names(&r), ["b3", "b2", "b0", "b4", "b1", "b5"]);
    }

    #[test]
    fn permission_matrix() {
        let (r, _) = reg_with(0);
        let other = Registry::new("orchestrator");
        let mut nb = NewBlock::new("plan", "do x");
        nb.source = Source::Orchestrator;
        nb.evictable = false;
        let id = r.insert(nb, other.id(), Position::Front).unwrap();
        assert!(matches!(
            r.evict(id, false, r.id()),
            Err(CoreError::Eviction { .. })
        ));
        assert!(matches!(
            r.evict(id, true, r.id()),
            Err(CoreError::Permission(_))
        ));
        assert!(matches!(
            r.update_content(id, "y", None, other.id()),
            Err(CoreError::OrchestratorMutation { .. })
        ));
        assert_eq!(r.len(), 1);
        r.evict(id, true, other.id()).unwrap();
        assert!(r.is_empty());
    }

    #[test]
    fn snapshot_restore_gives_new_ids() {
        let (r, ids) = reg_with(3);
        let snap = r.snapshot();
        r.evict(ids[0], false, r.id()).unwrap();
        r.restore(&snap, r.id()).unwrap();
        assert_eq!(names(&r), ["b0", "b1", "b2"]);
        for id in &ids {
            assert!(!r.contains(*id));
        }
        let other = Registry::new("other");
        assert!(other.restore(&snap, other.id()).is_err());
    }

    #[test]
    fn restore_leaves_blocks_pinned_by_others_alone() {
        let (r, ids) = reg_with(2);
        let boss = Registry::new("boss");
        let pinned = |name: &str| {
            let mut nb = NewBlock::new(name, "obey");
            nb.source = Source::Orchestrator;
            nb.evictable = false;
            r.insert(nb, boss.id(), Position::Front).unwrap()
        };
        let old = pinned("old");
        let snap = r.snapshot();
        let new = pinned("new");
        r.evict(old, true, boss.id()).unwrap();
        r.evict(ids[1], false, r.id()).unwrap();
        r.restore(&snap, r.id()).unwrap();
        // The receiver's own block is back; the block its author evicted is not;
        // the block pinned after the snapshot stays, under the id its author holds.
        assert_eq!(names(&r), ["new", "b0", "b1"]);
        assert!(r.contains(new));
        assert!(!r.contains(old));
    }

    #[test]
    fn evict_scored_skips_blocks_gone_meanwhile() {
        let (r, ids) = reg_with(4);
        let scored: Vec<(BlockId, f64)> = ids
            .iter()
            .zip([0.1, 0.9, 0.5, 0.9])
            .map(|(i, s)| (*i, s))
            .collect();
        r.evict(ids[1], false, r.id()).unwrap(); // another thread got there first
        let removed = r.evict_scored(&scored, Some(2), Some(0.2)).unwrap();
        assert_eq!(removed, [ids[3], ids[2]]);
        assert_eq!(names(&r), ["b0"]);
        assert!(r.evict_scored(&[(ids[0], f64::NAN)], None, None).is_err());
        assert_eq!(names(&r), ["b0"], "a refused call changes nothing");
    }

    #[test]
    fn evict_by_policy_ranks_low_priority_first() {
        let r = Registry::new("p");
        for (i, p) in [0.9, 0.1, 0.5].iter().enumerate() {
            let mut nb = NewBlock::new(format!("b{i}"), "x");
            nb.priority = *p;
            r.insert(nb, r.id(), Position::Back).unwrap();
        }
        let removed = r.evict_by_policy(Some(2), None);
        assert_eq!(removed.len(), 2);
        assert_eq!(names(&r), ["b0"]);
    }

    #[test]
    fn generation_moves_with_every_change() {
        let (r, ids) = reg_with(2);
        let g0 = r.order_and_generation().1;
        r.compile(None, req(None, 0)).unwrap();
        assert_eq!(
            r.order_and_generation().1,
            g0,
            "compiles change no generation"
        );
        r.update_priority(ids[0], 0.2).unwrap();
        let g1 = r.order_and_generation().1;
        assert!(g1 > g0);
        let snap = r.snapshot();
        r.restore(&snap, r.id()).unwrap();
        assert!(r.order_and_generation().1 > g1);
    }

    #[test]
    fn compile_keeps_order_view() {
        let (r, ids) = reg_with(3);
        let sel = r.compile(None, req(Some(21), 1)).unwrap();
        assert_eq!(sel.render("|"), "content 0|content 1");
        r.evict(ids[0], false, r.id()).unwrap();
        assert_eq!(
            sel.order.len(),
            3,
            "a result keeps the order it was compiled from"
        );
        assert_eq!(r.get(ids[1]).unwrap().access_count(), 1);
    }
}
