//! The instruction block: the unit the registry orders, gates, budgets and evicts.
//!
//! Blocks are immutable once built and shared as `Arc<Block>`: the registry's
//! order, a compile's selection and a snapshot all point at the same allocation,
//! so compiling or snapshotting never copies text. A change (priority, wrap,
//! content) builds a new block and swaps the pointer; readers that already hold
//! the old one keep a consistent view. The one exception is `access_count`, a
//! usage statistic that compiles bump atomically under a read lock.
//!
//! Layout is kept tight because registries hold up to millions of blocks (the
//! issue's budget is <= 200 bytes of overhead per block): name and content share
//! one allocation, and the rarely-set fields live behind one optional pointer.

use std::any::Any;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// A runtime id (UUID4 from the OS CSPRNG). Registry ids share the type.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct BlockId(pub [u8; 16]);

impl BlockId {
    /// A fresh UUID4 from the OS CSPRNG (`getrandom`). Never derived from content:
    /// ids are session-local addresses, unpredictable to text inside the prompt.
    pub fn random() -> Self {
        BlockId(*uuid::Uuid::new_v4().as_bytes())
    }

    pub fn parse(s: &str) -> Option<Self> {
        uuid::Uuid::try_parse(s)
            .ok()
            .map(|u| BlockId(*u.as_bytes()))
    }

    /// The hash of an id: eight of its uniformly random bytes.
    #[inline]
    pub fn hash64(&self) -> u64 {
        let mut low = [0u8; 8];
        low.copy_from_slice(&self.0[..8]);
        u64::from_le_bytes(low)
    }

    pub fn to_hyphenated(self) -> String {
        uuid::Uuid::from_bytes(self.0).hyphenated().to_string()
    }
    /// The hyphenated form written into `buf`, without allocating.
    pub fn encode_hyphenated(self, buf: &mut [u8; 36]) -> &str {
        uuid::Uuid::from_bytes(self.0)
            .hyphenated()
            .encode_lower(buf)
    }
}

impl Hash for BlockId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The bytes are uniformly random, so eight of them are already a perfect
        // hash; skipping SipHash saves ~15 ns per lookup.
        state.write_u64(self.hash64());
    }
}

/// Hasher for `BlockId` keys: passes the random bits through.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached if something other than BlockId is hashed; stay correct.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub type IdMap<V> = std::collections::HashMap<BlockId, V, BuildHasherDefault<IdHasher>>;

/// Provenance tag (the paper's `source`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    Seed,
    Agent,
    Orchestrator,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Seed => "seed",
            Source::Agent => "agent",
            Source::Orchestrator => "orchestrator",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "seed" => Some(Source::Seed),
            "agent" => Some(Source::Agent),
            "orchestrator" => Some(Source::Orchestrator),
            _ => None,
        }
    }
}

/// Compile-time decoration around a block's content (e.g. `<critical>`…`</critical>`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Wrap {
    pub prefix: Box<str>,
    pub suffix: Box<str>,
    /// Tokens of prefix + suffix under the registry's tokeniser.
    pub tokens: u32,
}

/// Fields most blocks leave empty, kept behind one pointer to keep `Block` small.
#[derive(Clone, Debug, Default)]
struct Extra {
    trajectory: Option<Box<str>>,
    /// Extra front-matter keys as JSON text: opaque to the core.
    meta: Option<Box<str>>,
    wrap: Option<Box<Wrap>>,
}

impl Extra {
    fn is_empty(&self) -> bool {
        self.trajectory.is_none() && self.meta.is_none() && self.wrap.is_none()
    }
}

/// `Block::token_count` before the first count.
const UNCOUNTED: u32 = u32::MAX;
/// `Block::row` when the block has no vector yet.
const NO_ROW: u32 = u32::MAX;
/// Set in `Block::row` when the embedded text was truncated; rows stay below it.
const TRUNCATED_BIT: u32 = 1 << 31;
/// Most rows an embedding matrix may hold (the truncation flag takes the top bit).
pub const MAX_ROWS: u32 = TRUNCATED_BIT - 1;
/// Longest name and tag list in bytes (their lengths are kept in 16 bits).
pub const MAX_NAME_BYTES: usize = u16::MAX as usize;

/// Separates tags inside a block's text allocation (never valid in a tag).
const TAG_SEP: char = '\u{1f}';

/// Everything the caller decides about a block before it enters a registry.
#[derive(Clone, Debug)]
pub struct NewBlock {
    pub name: String,
    pub content: String,
    pub priority: f64,
    pub source: Source,
    pub evictable: bool,
    pub trajectory: Option<String>,
    pub tags: Vec<String>,
    pub meta: Option<String>,
    /// A tool-schema block (see `Block::tool`).
    pub tool: bool,
    /// Whether the relevance gate may leave it out (see `Block::gated`).
    pub gated: bool,
    /// A precomputed vector for the relevance gate, stored with the block in the
    /// same write.
    pub embedding: Option<Vec<f32>>,
    /// Cached cost of `content`; `None` = count with the built-in cl100k_base.
    pub token_count: Option<u32>,
    /// The runtime id, when the caller chose it (a shared registry's journal
    /// carries the id the writer drew, so every replica uses the same one);
    /// `None` draws a fresh one.
    pub id: Option<BlockId>,
    /// Creation time, when the caller fixed it (journal replay); `None` = now.
    pub created_at: Option<u32>,
}

impl NewBlock {
    pub fn new(name: impl Into<String>, content: impl Into<String>) -> Self {
        NewBlock {
            name: name.into(),
            content: content.into(),
            priority: 0.5,
            source: Source::Agent,
            evictable: true,
            trajectory: None,
            tags: Vec::new(),
            meta: None,
            tool: false,
            gated: true,
            embedding: None,
            token_count: None,
            id: None,
            created_at: None,
        }
    }
}

/// Per-block cache owned by a language binding (the Python strings of the name
/// and rendered text, so compiles join cached strings instead of decoding UTF-8
/// again). Type-erased so the core stays free of pyo3; boxed twice so the slot
/// in `Block` is one thin pointer.
pub type Attachment = Box<dyn Any + Send + Sync>;

#[derive(Debug)]
pub struct Block {
    pub id: BlockId,
    pub author: BlockId,
    /// `name`, the tags (joined by `TAG_SEP`) and `content` in one allocation;
    /// `name_len` and `tags_len` split them. Tags nearly every seed block has
    /// would otherwise cost two more allocations per block.
    text: Arc<str>,
    extra: Option<Arc<Extra>>,
    pub priority: f64,
    /// Shared by every version of the block (a priority, wrap or content change
    /// makes a new version), so a compile that emitted an older version still
    /// counts for the block: no increment is lost to a concurrent change.
    access: Arc<AtomicU64>,
    name_len: u16,
    tags_len: u16,
    /// Row of this block's vector in the registry's embedding matrix
    /// (`embeddings.rs`), `NO_ROW` until embedded; the top bit says the text was
    /// truncated to the model's input. Atomic so the registry can attach a
    /// vector without making a new version (every version of the same content
    /// shares one row); written only under the registry's write lock.
    row: AtomicU32,
    /// Tokens of `content` under the registry's tokeniser; `UNCOUNTED` until
    /// first needed for a block written with the built-in cl100k_base (a single
    /// write then costs no counting; the first compile or read that needs the
    /// count pays it once). Every version of the same text carries the count on.
    pub(crate) token_count: AtomicU32,
    /// Tokens of the wrap text, copied out of `extra` so the budget walk never
    /// follows a second pointer.
    pub wrap_tokens: u32,
    pub created_at: u32,
    pub source: Source,
    pub evictable: bool,
    /// A tool-schema block: with `tools_in_prompt == false` it counts only
    /// toward the compile's tools list, not the prompt or its budget.
    pub tool: bool,
    /// `false`: the relevance gate never removes it (only the budget may), so a
    /// task-independent head stays byte-stable for the providers' prompt caches
    /// (docs/specification.md §8). Fits in the padding after `tool`: no size cost.
    pub gated: bool,
    /// Filled at most once, on first use; a changed block is a new `Block` and
    /// starts empty, so the cache can never go stale.
    attachment: OnceLock<Box<Attachment>>,
}

pub(crate) fn now_unix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

fn join_text(name: &str, tags: &str, content: &str) -> Arc<str> {
    let mut s = String::with_capacity(name.len() + tags.len() + content.len());
    s.push_str(name);
    s.push_str(tags);
    s.push_str(content);
    Arc::from(s)
}

/// Whether `tag` can be stored (non-empty, no separator character).
pub fn valid_tag(tag: &str) -> bool {
    !tag.is_empty() && !tag.contains(TAG_SEP)
}

impl Block {
    /// Build a block; the caller has validated the fields and counted tokens.
    /// `token_count == None`: counted with cl100k_base when first needed.
    pub(crate) fn build(nb: NewBlock, author: BlockId, token_count: Option<u32>) -> Block {
        let extra = Extra {
            trajectory: nb.trajectory.map(String::into_boxed_str),
            meta: nb.meta.map(String::into_boxed_str),
            wrap: None,
        };
        let tags = nb.tags.join(&TAG_SEP.to_string());
        Block {
            id: nb.id.unwrap_or_else(BlockId::random),
            author,
            name_len: nb.name.len() as u16,
            tags_len: tags.len() as u16,
            row: AtomicU32::new(NO_ROW),
            text: join_text(&nb.name, &tags, &nb.content),
            extra: if extra.is_empty() {
                None
            } else {
                Some(Arc::new(extra))
            },
            priority: nb.priority,
            access: Arc::new(AtomicU64::new(0)),
            token_count: AtomicU32::new(token_count.map_or(UNCOUNTED, |n| n.min(UNCOUNTED - 1))),
            wrap_tokens: 0,
            created_at: nb.created_at.unwrap_or_else(now_unix),
            source: nb.source,
            evictable: nb.evictable,
            tool: nb.tool,
            gated: nb.gated,
            attachment: OnceLock::new(),
        }
    }

    /// A block read back from a saved file: its creation time, access count and
    /// wrap as they were (a fresh id; the caller maps the author).
    pub(crate) fn restored(
        nb: NewBlock,
        author: BlockId,
        token_count: u32,
        created_at: u32,
        access: u64,
        wrap: Option<Wrap>,
    ) -> Block {
        let mut b = Block::build(nb, author, Some(token_count));
        b.created_at = created_at;
        b.access = Arc::new(AtomicU64::new(access));
        if wrap.is_some() {
            b = b.with_wrap(wrap);
        }
        b
    }

    /// The binding's cache for this block, if set.
    pub fn attachment(&self) -> Option<&Attachment> {
        self.attachment.get().map(|b| &**b)
    }

    /// Set the binding's cache (first caller wins) and return what is stored.
    pub fn attach(&self, value: Attachment) -> &Attachment {
        let _ = self.attachment.set(Box::new(value));
        self.attachment.get().expect("just set")
    }

    pub fn name(&self) -> &str {
        &self.text[..self.name_len as usize]
    }
    fn tags_str(&self) -> &str {
        let start = self.name_len as usize;
        &self.text[start..start + self.tags_len as usize]
    }
    pub fn content(&self) -> &str {
        &self.text[(self.name_len as usize + self.tags_len as usize)..]
    }
    pub fn trajectory(&self) -> Option<&str> {
        self.extra.as_ref().and_then(|e| e.trajectory.as_deref())
    }
    pub fn tags(&self) -> impl Iterator<Item = &str> + '_ {
        let s = self.tags_str();
        s.split(TAG_SEP).filter(move |_| !s.is_empty())
    }
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags().any(|t| t == tag)
    }
    pub fn meta(&self) -> Option<&str> {
        self.extra.as_ref().and_then(|e| e.meta.as_deref())
    }
    pub fn wrap(&self) -> Option<&Wrap> {
        self.extra.as_ref().and_then(|e| e.wrap.as_deref())
    }
    pub fn access_count(&self) -> u64 {
        self.access.load(Ordering::Relaxed)
    }
    pub(crate) fn record_access(&self) {
        self.access.fetch_add(1, Ordering::Relaxed);
    }
    /// Add accesses counted elsewhere (another replica of a shared registry).
    pub(crate) fn add_accesses(&self, n: u64) {
        self.access.fetch_add(n, Ordering::Relaxed);
    }
    /// Tokens of the content (counted with cl100k_base on first use when the
    /// block was written without a count). Racing threads count the same text
    /// and store the same number, so no lock is needed.
    #[inline]
    pub fn token_count(&self) -> u32 {
        let n = self.token_count.load(Ordering::Relaxed);
        if n != UNCOUNTED {
            return n;
        }
        let n = crate::tokens::count_cl100k(self.content()).min(UNCOUNTED - 1);
        self.token_count.store(n, Ordering::Relaxed);
        n
    }
    /// Cost of this block in a prompt, separator excluded.
    #[inline]
    pub fn cost(&self) -> u64 {
        u64::from(self.token_count()) + u64::from(self.wrap_tokens)
    }
    /// Bytes this block adds to a rendered prompt, separator excluded.
    #[inline]
    pub(crate) fn rendered_len(&self) -> usize {
        let wrap = self
            .wrap()
            .map(|w| w.prefix.len() + w.suffix.len())
            .unwrap_or(0);
        self.text.len() - (self.name_len as usize + self.tags_len as usize) + wrap
    }
    pub(crate) fn render_into(&self, out: &mut String) {
        match self.wrap() {
            Some(w) => {
                out.push_str(&w.prefix);
                out.push_str(self.content());
                out.push_str(&w.suffix);
            }
            None => out.push_str(self.content()),
        }
    }

    /// A new version of this block: same id, same access counter.
    fn version(&self) -> Block {
        self.copy(self.id, Arc::clone(&self.access))
    }

    fn copy(&self, id: BlockId, access: Arc<AtomicU64>) -> Block {
        Block {
            id,
            author: self.author,
            text: Arc::clone(&self.text),
            extra: self.extra.clone(),
            priority: self.priority,
            access,
            name_len: self.name_len,
            tags_len: self.tags_len,
            row: AtomicU32::new(self.row.load(Ordering::Relaxed)),
            token_count: AtomicU32::new(self.token_count.load(Ordering::Relaxed)),
            wrap_tokens: self.wrap_tokens,
            created_at: self.created_at,
            source: self.source,
            evictable: self.evictable,
            tool: self.tool,
            gated: self.gated,
            attachment: OnceLock::new(),
        }
    }

    /// The same block as a new logical block (snapshot restore): fresh id, its
    /// own access counter starting at `access_count`.
    pub(crate) fn with_new_id(&self, id: BlockId, access_count: u64) -> Block {
        self.copy(id, Arc::new(AtomicU64::new(access_count)))
    }
    pub(crate) fn with_gated(&self, gated: bool) -> Block {
        let mut b = self.version();
        b.gated = gated;
        b
    }
    pub(crate) fn with_priority(&self, priority: f64) -> Block {
        let mut b = self.version();
        b.priority = priority;
        b
    }
    pub(crate) fn with_wrap(&self, wrap: Option<Wrap>) -> Block {
        let mut b = self.version();
        let mut extra = b.extra.as_deref().cloned().unwrap_or_default();
        b.wrap_tokens = wrap.as_ref().map(|w| w.tokens).unwrap_or(0);
        extra.wrap = wrap.map(Box::new);
        b.extra = if extra.is_empty() {
            None
        } else {
            Some(Arc::new(extra))
        };
        b
    }
    pub(crate) fn with_content(&self, content: &str, token_count: u32) -> Block {
        let mut b = self.version();
        b.text = join_text(self.name(), self.tags_str(), content);
        b.token_count = AtomicU32::new(token_count.min(UNCOUNTED - 1));
        // New text, new vector: the gate embeds it before it next scores.
        b.row = AtomicU32::new(NO_ROW);
        b
    }

    /// Identity of this version's text: versions that share it (priority or
    /// wrap changes) share one embedding; a content change makes a new one.
    #[inline]
    pub fn text_key(&self) -> usize {
        Arc::as_ptr(&self.text) as *const u8 as usize
    }
    /// The embedding row, if the block has a vector.
    #[inline]
    pub fn row(&self) -> Option<u32> {
        let r = self.row.load(Ordering::Relaxed);
        (r != NO_ROW).then_some(r & !TRUNCATED_BIT)
    }
    /// Whether the embedded text was cut to the model's input length.
    pub fn truncated(&self) -> bool {
        let r = self.row.load(Ordering::Relaxed);
        r != NO_ROW && r & TRUNCATED_BIT != 0
    }
    pub(crate) fn set_row(&self, row: Option<u32>, truncated: bool) {
        let v = match row {
            Some(r) if truncated => r | TRUNCATED_BIT,
            Some(r) => r,
            None => NO_ROW,
        };
        self.row.store(v, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_and_content_split() {
        let mut nb = NewBlock::new("rules", "Always run the tests.");
        nb.tags = vec!["a".into(), "bc".into()];
        let b = Block::build(nb, BlockId::random(), Some(5));
        assert_eq!(b.name(), "rules");
        assert_eq!(b.content(), "Always run the tests.");
        assert_eq!(b.tags().collect::<Vec<_>>(), ["a", "bc"]);
        assert!(b.has_tag("a") && b.has_tag("bc") && !b.has_tag("b"));
        let c = b.with_content("New text.", 2);
        assert_eq!((c.name(), c.content()), ("rules", "New text."));
        assert_eq!(c.tags().count(), 2);
        let untagged = Block::build(NewBlock::new("n", "x"), BlockId::random(), Some(1));
        assert_eq!(untagged.tags().count(), 0);
        assert_eq!(b.rendered_len(), "Always run the tests.".len());
    }

    #[test]
    fn ids_are_random_and_round_trip() {
        let a = BlockId::random();
        let b = BlockId::random();
        assert_ne!(a, b);
        assert_eq!(BlockId::parse(&a.to_hyphenated()), Some(a));
        assert_eq!(BlockId::parse("not-an-id"), None);
    }

    #[test]
    fn wrap_changes_cost_and_rendering() {
        let b = Block::build(NewBlock::new("n", "body"), BlockId::random(), Some(3));
        let w = b.with_wrap(Some(Wrap {
            prefix: "<c>".into(),
            suffix: "</c>".into(),
            tokens: 4,
        }));
        assert_eq!(w.cost(), 7);
        let mut s = String::new();
        w.render_into(&mut s);
        assert_eq!(s, "<c>body</c>");
        assert_eq!(w.rendered_len(), s.len());
        assert_eq!(w.id, b.id);
        let unwrapped = w.with_wrap(None);
        assert_eq!(unwrapped.cost(), 3);
        assert!(unwrapped.extra.is_none());
    }

    #[test]
    fn block_stays_small() {
        // The per-block memory budget depends on this; see tests/memory.rs.
        assert!(
            std::mem::size_of::<Block>() <= 112,
            "{}",
            std::mem::size_of::<Block>()
        );
    }
}
