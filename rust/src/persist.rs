//! The registry's file format: one versioned, checksummed byte string holding
//! every block (in order, with provenance and access counts) and the embedding
//! matrix, so a load needs no re-embedding.
//!
//! Layout (little-endian):
//!
//! ```text
//! magic "RAMPART\0" | version u32 | payload length u64 | payload | crc32(payload) u32
//! payload: saved registry id [16] | label str | settings str (JSON, opaque
//!          to the core) | dim u32 | author count u32
//!          | authors (id [16], label str)* | block count u64 | blocks*
//!          | float32 rows, one per block with a vector, in block order
//! block:   name str | content str | tag count u32 | tags str* | meta opt-str
//!          | trajectory opt-str | wrap (u8, prefix str, suffix str, tokens u32)
//!          | priority f64 | source u8 | flags u8 | author index u32
//!          | token_count u32 | wrap tokens u32 | created_at u32 | access u64
//! str:     length u32 | UTF-8 bytes;  opt-str: u8 present | str
//! flags:   1 evictable, 2 tool, 4 has vector, 8 vector truncated, 16 ungated
//!          (set for `gated == false`, so files from before the flag read as gated)
//! ```
//!
//! Decoding checks everything (magic, version, length, checksum, every bound,
//! UTF-8, enum values) before a single block is built, so a truncated, corrupt
//! or newer file is an error and nothing is created.

use crate::block::{Block, BlockId, NewBlock, Source, Wrap};
use crate::error::{CoreError, Result};

pub const MAGIC: &[u8; 8] = b"RAMPART\0";
pub const VERSION: u32 = 1;

const EVICTABLE: u8 = 1;
const TOOL: u8 = 2;
const HAS_VECTOR: u8 = 4;
const TRUNCATED: u8 = 8;
const UNGATED: u8 = 16;

/// One block as read back from a file.
pub struct SavedBlock {
    pub block: NewBlock,
    pub wrap: Option<Wrap>,
    pub author: BlockId,
    pub created_at: u32,
    pub access: u64,
    pub truncated: bool,
}

/// A decoded file: nothing in it touches a registry yet.
pub struct SavedRegistry {
    pub registry: BlockId,
    pub label: String,
    /// The binding's settings (tokeniser, budget) as it wrote them.
    pub settings: String,
    pub dim: usize,
    pub authors: Vec<(BlockId, String)>,
    pub blocks: Vec<SavedBlock>,
}

// ---- encode ------------------------------------------------------------------------

pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    /// A compile-time wrap: marker u8 (0 none, 1 some), prefix, suffix, tokens.
    pub(crate) fn wrap(&mut self, wrap: Option<&Wrap>) {
        match wrap {
            Some(wr) => {
                self.u8(1);
                self.str(&wr.prefix);
                self.str(&wr.suffix);
                self.u32(wr.tokens);
            }
            None => self.u8(0),
        }
    }
    pub(crate) fn opt(&mut self, s: Option<&str>) {
        match s {
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
            None => self.u8(0),
        }
    }
}

/// What `encode` needs per block: the block, its access count and its vector.
pub struct Entry<'a> {
    pub block: &'a Block,
    pub access: u64,
    pub vector: Option<&'a [f32]>,
}

pub fn encode(
    registry: BlockId,
    label: &str,
    settings: &str,
    dim: usize,
    authors: &[(BlockId, String)],
    entries: &[Entry<'_>],
) -> Vec<u8> {
    let text: usize = entries.iter().map(|e| e.block.content().len() + 64).sum();
    let vectors = entries.iter().filter(|e| e.vector.is_some()).count() * dim * 4;
    let mut w = Writer(Vec::with_capacity(32 + text + vectors));
    w.0.extend_from_slice(MAGIC);
    w.u32(VERSION);
    w.u64(0); // payload length, patched below
    let start = w.0.len();
    w.0.extend_from_slice(&registry.0);
    w.str(label);
    w.str(settings);
    w.u32(dim as u32);
    w.u32(authors.len() as u32);
    for (id, l) in authors {
        w.0.extend_from_slice(&id.0);
        w.str(l);
    }
    w.u64(entries.len() as u64);
    for e in entries {
        let b = e.block;
        w.str(b.name());
        w.str(b.content());
        let tags: Vec<&str> = b.tags().collect();
        w.u32(tags.len() as u32);
        for t in tags {
            w.str(t);
        }
        w.opt(b.meta());
        w.opt(b.trajectory());
        w.wrap(b.wrap());
        w.0.extend_from_slice(&b.priority.to_le_bytes());
        w.u8(match b.source {
            Source::Seed => 0,
            Source::Agent => 1,
            Source::Orchestrator => 2,
        });
        let mut flags = 0;
        if b.evictable {
            flags |= EVICTABLE;
        }
        if b.tool {
            flags |= TOOL;
        }
        if !b.gated {
            flags |= UNGATED;
        }
        if e.vector.is_some() {
            flags |= HAS_VECTOR;
            if b.truncated() {
                flags |= TRUNCATED;
            }
        }
        w.u8(flags);
        let author = authors
            .iter()
            .position(|(id, _)| *id == b.author)
            .expect("every author is listed") as u32;
        w.u32(author);
        w.u32(b.token_count());
        w.u32(b.wrap_tokens);
        w.u32(b.created_at);
        w.u64(e.access);
    }
    for v in entries.iter().filter_map(|e| e.vector) {
        put_floats(&mut w.0, v);
    }
    let len = (w.0.len() - start) as u64;
    w.0[start - 8..start].copy_from_slice(&len.to_le_bytes());
    let crc = crc32fast::hash(&w.0[start..]);
    w.u32(crc);
    w.0
}

/// Append float32 values little-endian: one copy on little-endian machines.
pub(crate) fn put_floats(out: &mut Vec<u8>, v: &[f32]) {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: any f32 is 4 initialised bytes, u8 has alignment 1, and the
        // length covers exactly the slice's memory.
        let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 4) };
        out.extend_from_slice(bytes);
    }
    #[cfg(not(target_endian = "little"))]
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

// ---- decode ------------------------------------------------------------------------

pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) at: usize,
}

pub(crate) fn corrupt(what: &str) -> CoreError {
    CoreError::Corrupt(what.to_string())
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| corrupt(&format!("it ends inside {what}")))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub(crate) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    pub(crate) fn id(&mut self, what: &str) -> Result<BlockId> {
        Ok(BlockId(self.take(16, what)?.try_into().unwrap()))
    }
    pub(crate) fn str(&mut self, what: &str) -> Result<String> {
        let n = self.u32(what)? as usize;
        let bytes = self.take(n, what)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| corrupt(&format!("{what} is not UTF-8")))
    }
    pub(crate) fn wrap(&mut self, what: &str) -> Result<Option<Wrap>> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(Wrap {
                prefix: self.str(what)?.into_boxed_str(),
                suffix: self.str(what)?.into_boxed_str(),
                tokens: self.u32(what)?,
            })),
            _ => Err(corrupt(&format!("bad wrap marker in {what}"))),
        }
    }
    pub(crate) fn opt(&mut self, what: &str) -> Result<Option<String>> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => self.str(what).map(Some),
            _ => Err(corrupt(&format!("bad marker in {what}"))),
        }
    }
}

/// Decode and check a whole file. Errors say what is wrong, never panic.
pub fn decode(buf: &[u8]) -> Result<SavedRegistry> {
    if buf.len() < 8 || &buf[..8] != MAGIC {
        return Err(corrupt(
            "it is not a rampart registry file (bad magic bytes)",
        ));
    }
    let mut r = Reader { buf, at: 8 };
    let version = r.u32("the header")?;
    if version > VERSION {
        return Err(CoreError::Corrupt(format!(
            "it was written by a newer rampart (format version {version}; this one reads up \
             to {VERSION}): upgrade rampart to load it"
        )));
    }
    if version == 0 {
        return Err(corrupt("format version 0 does not exist"));
    }
    let len = r.u64("the header")? as usize;
    let start = r.at;
    if buf.len() < start || buf.len() - start < 4 || buf.len() - start - 4 != len {
        return Err(CoreError::Corrupt(format!(
            "it is truncated or has trailing bytes (header says {len} payload bytes, file \
             holds {})",
            buf.len().saturating_sub(start + 4)
        )));
    }
    let payload = &buf[start..start + len];
    let crc = u32::from_le_bytes(buf[start + len..].try_into().unwrap());
    if crc32fast::hash(payload) != crc {
        return Err(corrupt("its checksum does not match (the file is damaged)"));
    }
    let mut r = Reader {
        buf: payload,
        at: 0,
    };
    let registry = r.id("the registry id")?;
    let label = r.str("the registry label")?;
    let settings = r.str("the settings")?;
    let dim = r.u32("the embedding dimension")? as usize;
    let n_authors = r.u32("the author table")? as usize;
    let mut authors = Vec::with_capacity(n_authors.min(1 << 16));
    for _ in 0..n_authors {
        let id = r.id("the author table")?;
        authors.push((id, r.str("the author table")?));
    }
    let n = r.u64("the block count")? as usize;
    // Each block takes at least 40 bytes: a count beyond that is corruption,
    // caught before allocating for it.
    if n > payload.len() / 40 {
        return Err(corrupt("its block count is larger than the file"));
    }
    let mut blocks = Vec::with_capacity(n);
    let mut with_vector = 0;
    for k in 0..n {
        let what = format!("block #{k}");
        let name = r.str(&what)?;
        let content = r.str(&what)?;
        let n_tags = r.u32(&what)? as usize;
        let mut tags = Vec::with_capacity(n_tags.min(1024));
        for _ in 0..n_tags {
            tags.push(r.str(&what)?);
        }
        let meta = r.opt(&what)?;
        let trajectory = r.opt(&what)?;
        let wrap = r.wrap(&what)?;
        let priority = f64::from_le_bytes(r.take(8, &what)?.try_into().unwrap());
        if !(0.0..=1.0).contains(&priority) {
            return Err(corrupt(&format!("{what} has priority {priority}")));
        }
        let source = match r.u8(&what)? {
            0 => Source::Seed,
            1 => Source::Agent,
            2 => Source::Orchestrator,
            s => return Err(corrupt(&format!("{what} has unknown source {s}"))),
        };
        let flags = r.u8(&what)?;
        if flags >= UNGATED << 1 {
            return Err(corrupt(&format!("{what} has unknown flags {flags}")));
        }
        let author = r.u32(&what)? as usize;
        let author = authors
            .get(author)
            .map(|a| a.0)
            .ok_or_else(|| corrupt(&format!("{what} names author #{author}, not in the table")))?;
        let token_count = r.u32(&what)?;
        let _wrap_tokens = r.u32(&what)?;
        let created_at = r.u32(&what)?;
        let access = r.u64(&what)?;
        if flags & HAS_VECTOR != 0 {
            with_vector += 1;
        }
        let mut nb = NewBlock::new(name, content);
        nb.priority = priority;
        nb.source = source;
        nb.evictable = flags & EVICTABLE != 0;
        nb.tool = flags & TOOL != 0;
        nb.gated = flags & UNGATED == 0;
        nb.trajectory = trajectory;
        nb.tags = tags;
        nb.meta = meta;
        nb.token_count = Some(token_count);
        // Marks a vector to read below; replaced by the real one.
        nb.embedding = (flags & HAS_VECTOR != 0).then(Vec::new);
        blocks.push(SavedBlock {
            block: nb,
            wrap,
            author,
            created_at,
            access,
            truncated: flags & TRUNCATED != 0,
        });
    }
    if with_vector > 0 && dim == 0 {
        return Err(corrupt("it has vectors of dimension 0"));
    }
    let rest = payload.len() - r.at;
    if rest != with_vector * dim * 4 {
        return Err(CoreError::Corrupt(format!(
            "its embedding section holds {rest} bytes, expected {} ({with_vector} vectors of \
             {dim} floats)",
            with_vector * dim * 4
        )));
    }
    let mut floats = payload[r.at..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()));
    for b in &mut blocks {
        if b.block.embedding.is_some() {
            let v: Vec<f32> = floats.by_ref().take(dim).collect();
            if v.iter().any(|x| !x.is_finite()) {
                return Err(corrupt("an embedding holds NaN or infinite values"));
            }
            b.block.embedding = Some(v);
        }
    }
    Ok(SavedRegistry {
        registry,
        label,
        settings,
        dim,
        authors,
        blocks,
    })
}

/// Append the id trailer of a checkpoint: the ids in order, then their count.
pub fn append_ids(out: &mut Vec<u8>, ids: impl ExactSizeIterator<Item = BlockId>) {
    let n = ids.len() as u64;
    for id in ids {
        out.extend_from_slice(&id.0);
    }
    out.extend_from_slice(&n.to_le_bytes());
}
