//! The journal of a shared registry (docs/specification.md §7): every mutating operation as one
//! compact, versioned byte string, and the replica side that applies them.
//!
//! A shared registry is a local replica of an ordered log kept by a store
//! (SQLite, Redis). The store orders and keeps the entries; this module decides
//! what an entry *means*. Every replica decodes the same bytes and applies them
//! through the same core methods a local registry uses (`insert`, `evict`,
//! `restore_blocks`…), validating at apply time, so an operation that fails
//! fails identically everywhere and a journal gives byte-identical state in
//! every replica. Whatever only one process knows is decided before encoding and
//! travels in the entry: runtime ids and creation times (drawn by the writer),
//! the ids a custom eviction policy chose, the new ids of a restore, vectors.
//!
//! Entry layout (little-endian; strings as in `persist.rs`):
//!
//! ```text
//! version u8 (= 1) | origin [16] | op u8 | fields of the op
//! ```
//!
//! `origin` is the replica that appended the entry; it matters only for access
//! counts, which the appending replica has already counted. A decoder refuses
//! newer versions, unknown ops, bad bounds and trailing bytes, so a garbage entry
//! (a foreign client's) is skipped by every replica in the same way.

use std::sync::Arc;

use crate::block::{now_unix, Block, BlockId, NewBlock, Source, Wrap};
use crate::error::{CoreError, Result};
use crate::persist::{append_ids, corrupt, decode, encode, put_floats, Entry, Reader, Writer};
use crate::registry::{authors_of, label_of, Position, Registry, Snapshot};

pub const VERSION: u8 = 1;

/// One mutating operation, with everything decided that replay must not decide.
#[derive(Clone, Debug)]
pub enum Op {
    /// Blocks written by `author`: one at `position`, or many appended (seed
    /// loads, tool schemas) all or nothing. Each carries its id and creation time.
    Insert {
        author: BlockId,
        position: Option<Position>,
        blocks: Vec<NewBlock>,
    },
    UpdateContent {
        id: BlockId,
        content: String,
        token_count: Option<u32>,
        actor: BlockId,
    },
    UpdatePriority {
        id: BlockId,
        priority: f64,
    },
    SetWrap {
        id: BlockId,
        wrap: Option<Wrap>,
    },
    SetGated {
        id: BlockId,
        gated: bool,
    },
    MoveTo {
        id: BlockId,
        position: i64,
    },
    MoveBy {
        id: BlockId,
        steps: i64,
    },
    MoveNextTo {
        id: BlockId,
        anchor: BlockId,
        after: bool,
    },
    PromoteGroup {
        ids: Vec<BlockId>,
        position: i64,
    },
    Evict {
        id: BlockId,
        force: bool,
        actor: BlockId,
    },
    Rollback {
        trajectory: String,
        actor: BlockId,
    },
    /// A caller's eviction policy: its scores, ranked and cut at apply time
    /// (`Registry::evict_scored`) against the state every replica has there.
    EvictScored {
        scored: Vec<(BlockId, f64)>,
        limit: Option<u64>,
        threshold: Option<f64>,
    },
    /// A snapshot (held in memory by a local call, or as checkpoint bytes with
    /// the old ids inside when decoded from an entry) and the new ids.
    Restore {
        snapshot: Restored,
        new_ids: Vec<BlockId>,
        actor: BlockId,
    },
    /// Vectors computed by one replica: (block, hash of the text, truncated, vector).
    Embed {
        items: Vec<(BlockId, u64, bool, Vec<f32>)>,
    },
    /// Access counts one replica counted since its last flush (they commute).
    Access {
        deltas: Vec<(BlockId, u64)>,
    },
}

/// The snapshot of a restore: the one taken in this process, or its bytes as
/// they travel in the journal (`snapshot_bytes`).
#[derive(Clone, Debug)]
pub enum Restored {
    /// Boxed: it is large, and every other op is moved by value on the write path.
    Taken(Box<Snapshot>),
    Bytes(Vec<u8>),
}

/// What applying an entry returned: what the local call returns.
#[derive(Clone, Debug)]
pub enum Outcome {
    Nothing,
    /// The id of the one block a positioned insert wrote.
    Id(BlockId),
    Ids(Vec<BlockId>),
    Index(usize),
    Count(usize),
    /// The evicted block's id (the binding returns a view of the old block).
    Evicted(Arc<Block>),
}

// ---- encode --------------------------------------------------------------------------

const INSERT: u8 = 1;
const UPDATE_CONTENT: u8 = 2;
const UPDATE_PRIORITY: u8 = 3;
const SET_WRAP: u8 = 4;
const MOVE_TO: u8 = 5;
const MOVE_BY: u8 = 6;
const MOVE_NEXT_TO: u8 = 7;
const PROMOTE_GROUP: u8 = 8;
const EVICT: u8 = 9;
const EVICT_SCORED: u8 = 10;
const ROLLBACK: u8 = 11;
const RESTORE: u8 = 12;
const EMBED: u8 = 13;
const ACCESS: u8 = 14;
const SET_GATED: u8 = 15;

/// Most blocks, ids or vectors one entry may carry (bounds what a hostile entry
/// can make a replica allocate before validation).
const MAX_ITEMS: usize = 1 << 24;
/// Largest vector dimension an entry may carry.
const MAX_DIM: usize = 1 << 16;

impl Writer {
    fn id(&mut self, id: BlockId) {
        self.0.extend_from_slice(&id.0);
    }
    fn ids(&mut self, ids: &[BlockId]) {
        self.u32(ids.len() as u32);
        for id in ids {
            self.id(*id);
        }
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn opt_u32(&mut self, v: Option<u32>) {
        match v {
            Some(n) => {
                self.u8(1);
                self.u32(n);
            }
            None => self.u8(0),
        }
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn floats(&mut self, v: &[f32]) {
        self.u32(v.len() as u32);
        put_floats(&mut self.0, v);
    }
}

fn source_byte(s: Source) -> u8 {
    match s {
        Source::Seed => 0,
        Source::Agent => 1,
        Source::Orchestrator => 2,
    }
}

fn encode_block(w: &mut Writer, b: &NewBlock) {
    w.id(b.id.expect("a journaled block carries its id"));
    w.u32(
        b.created_at
            .expect("a journaled block carries its creation time"),
    );
    w.str(&b.name);
    w.str(&b.content);
    w.u32(b.tags.len() as u32);
    for t in &b.tags {
        w.str(t);
    }
    w.opt(b.meta.as_deref());
    w.opt(b.trajectory.as_deref());
    w.f64(b.priority);
    w.u8(source_byte(b.source));
    w.u8(u8::from(b.evictable) | (u8::from(b.tool) << 1) | (u8::from(!b.gated) << 2));
    w.opt_u32(b.token_count);
    match &b.embedding {
        Some(v) => {
            w.u8(1);
            w.floats(v);
        }
        None => w.u8(0),
    }
}

/// Encode `op` as a journal entry appended by `origin`. Blocks of an `Insert`
/// must carry their id and creation time (`stamp` gives them).
pub fn encode_entry(origin: BlockId, op: &Op) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(64));
    w.u8(VERSION);
    w.id(origin);
    match op {
        Op::Insert {
            author,
            position,
            blocks,
        } => {
            w.u8(INSERT);
            w.id(*author);
            match position {
                None => w.u8(0),
                Some(Position::Back) => w.u8(1),
                Some(Position::Front) => w.u8(2),
                Some(Position::At(p)) => {
                    w.u8(3);
                    w.i64(*p);
                }
            }
            w.u32(blocks.len() as u32);
            for b in blocks {
                encode_block(&mut w, b);
            }
        }
        Op::UpdateContent {
            id,
            content,
            token_count,
            actor,
        } => {
            w.u8(UPDATE_CONTENT);
            w.id(*id);
            w.str(content);
            w.opt_u32(*token_count);
            w.id(*actor);
        }
        Op::UpdatePriority { id, priority } => {
            w.u8(UPDATE_PRIORITY);
            w.id(*id);
            w.f64(*priority);
        }
        Op::SetWrap { id, wrap } => {
            w.u8(SET_WRAP);
            w.id(*id);
            w.wrap(wrap.as_ref());
        }
        Op::SetGated { id, gated } => {
            w.u8(SET_GATED);
            w.id(*id);
            w.u8(u8::from(*gated));
        }
        Op::MoveTo { id, position } => {
            w.u8(MOVE_TO);
            w.id(*id);
            w.i64(*position);
        }
        Op::MoveBy { id, steps } => {
            w.u8(MOVE_BY);
            w.id(*id);
            w.i64(*steps);
        }
        Op::MoveNextTo { id, anchor, after } => {
            w.u8(MOVE_NEXT_TO);
            w.id(*id);
            w.id(*anchor);
            w.u8(u8::from(*after));
        }
        Op::PromoteGroup { ids, position } => {
            w.u8(PROMOTE_GROUP);
            w.ids(ids);
            w.i64(*position);
        }
        Op::Evict { id, force, actor } => {
            w.u8(EVICT);
            w.id(*id);
            w.u8(u8::from(*force));
            w.id(*actor);
        }
        Op::Rollback { trajectory, actor } => {
            w.u8(ROLLBACK);
            w.str(trajectory);
            w.id(*actor);
        }
        Op::EvictScored {
            scored,
            limit,
            threshold,
        } => {
            w.u8(EVICT_SCORED);
            w.u32(scored.len() as u32);
            for (id, score) in scored {
                w.id(*id);
                w.f64(*score);
            }
            match limit {
                Some(n) => {
                    w.u8(1);
                    w.u64(*n);
                }
                None => w.u8(0),
            }
            match threshold {
                Some(t) => {
                    w.u8(1);
                    w.f64(*t);
                }
                None => w.u8(0),
            }
        }
        Op::Restore {
            snapshot,
            new_ids,
            actor,
        } => {
            w.u8(RESTORE);
            match snapshot {
                Restored::Taken(snap) => w.bytes(&snapshot_bytes(snap)),
                Restored::Bytes(b) => w.bytes(b),
            }
            w.ids(new_ids);
            w.id(*actor);
        }
        Op::Embed { items } => {
            w.u8(EMBED);
            w.u32(items.len() as u32);
            for (id, hash, truncated, v) in items {
                w.id(*id);
                w.u64(*hash);
                w.u8(u8::from(*truncated));
                w.floats(v);
            }
        }
        Op::Access { deltas } => {
            w.u8(ACCESS);
            w.u32(deltas.len() as u32);
            for (id, n) in deltas {
                w.id(*id);
                w.u64(*n);
            }
        }
    }
    w.0
}

/// Give every block of an insert a fresh id and the current time (the writer's
/// decision, replayed as is).
pub fn stamp(blocks: &mut [NewBlock]) {
    let now = now_unix();
    for b in blocks {
        b.id.get_or_insert_with(BlockId::random);
        b.created_at.get_or_insert(now);
    }
}

/// A snapshot as checkpoint bytes (the `save` format plus the old ids), for a
/// journaled restore.
pub fn snapshot_bytes(snap: &Snapshot) -> Vec<u8> {
    let authors = authors_of(snap.registry, label_of(snap.registry), &snap.order);
    let entries: Vec<Entry<'_>> = snap
        .order
        .iter()
        .zip(&snap.access_counts)
        .map(|(b, &access)| Entry {
            block: b,
            access,
            vector: snap.embeddings.vector(b),
        })
        .collect();
    let mut out = encode(
        snap.registry,
        "",
        "",
        snap.embeddings.dim(),
        &authors,
        &entries,
    );
    append_ids(&mut out, snap.order.iter().map(|b| b.id));
    out
}

/// Split checkpoint bytes into the decoded registry and its block ids.
pub fn decode_checkpoint(buf: &[u8]) -> Result<(crate::persist::SavedRegistry, Vec<BlockId>)> {
    if buf.len() < 8 {
        return Err(corrupt("the checkpoint is truncated"));
    }
    let n = u64::from_le_bytes(buf[buf.len() - 8..].try_into().unwrap());
    let body = buf.len() - 8;
    let ids_len = n
        .checked_mul(16)
        .filter(|&l| l <= body as u64)
        .ok_or_else(|| corrupt("the checkpoint's id count is larger than the checkpoint"))?
        as usize;
    let saved = decode(&buf[..body - ids_len])?;
    if saved.blocks.len() != n as usize {
        return Err(CoreError::Corrupt(format!(
            "the checkpoint lists {n} ids for {} blocks",
            saved.blocks.len()
        )));
    }
    let ids = buf[body - ids_len..body]
        .chunks_exact(16)
        .map(|c| BlockId(c.try_into().unwrap()))
        .collect();
    Ok((saved, ids))
}

// ---- decode --------------------------------------------------------------------------

impl Reader<'_> {
    fn count(&mut self, what: &str, min_bytes: usize) -> Result<usize> {
        let n = self.u32(what)? as usize;
        // Every item takes at least `min_bytes`: a count beyond what is left is
        // garbage, refused before allocating for it.
        if n > MAX_ITEMS || n.saturating_mul(min_bytes) > self.buf.len() - self.at {
            return Err(corrupt(&format!(
                "{what} count {n} is larger than the entry"
            )));
        }
        Ok(n)
    }
    fn ids(&mut self, what: &str) -> Result<Vec<BlockId>> {
        let n = self.count(what, 16)?;
        (0..n).map(|_| self.id(what)).collect()
    }
    fn i64(&mut self, what: &str) -> Result<i64> {
        Ok(i64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn flag(&mut self, what: &str) -> Result<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(corrupt(&format!("bad flag {v} in {what}"))),
        }
    }
    fn opt_u32(&mut self, what: &str) -> Result<Option<u32>> {
        Ok(if self.flag(what)? {
            Some(self.u32(what)?)
        } else {
            None
        })
    }
    fn floats(&mut self, what: &str) -> Result<Vec<f32>> {
        let n = self.u32(what)? as usize;
        if n == 0 || n > MAX_DIM {
            return Err(corrupt(&format!("{what} has a vector of {n} dimensions")));
        }
        let raw = self.take(n * 4, what)?;
        let v: Vec<f32> = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        if v.iter().any(|x| !x.is_finite()) {
            return Err(corrupt(&format!("{what} holds NaN or infinite values")));
        }
        Ok(v)
    }
    fn block(&mut self) -> Result<NewBlock> {
        let what = "a written block";
        let id = self.id(what)?;
        let created_at = self.u32(what)?;
        let name = self.str(what)?;
        let content = self.str(what)?;
        let n_tags = self.count(what, 4)?;
        let tags = (0..n_tags).map(|_| self.str(what)).collect::<Result<_>>()?;
        let meta = self.opt(what)?;
        let trajectory = self.opt(what)?;
        let priority = self.f64(what)?;
        let source = match self.u8(what)? {
            0 => Source::Seed,
            1 => Source::Agent,
            2 => Source::Orchestrator,
            s => return Err(corrupt(&format!("unknown source {s} in {what}"))),
        };
        let flags = self.u8(what)?;
        if flags > 7 {
            return Err(corrupt(&format!("bad flags {flags} in {what}")));
        }
        let token_count = self.opt_u32(what)?;
        let embedding = if self.flag(what)? {
            Some(self.floats(what)?)
        } else {
            None
        };
        let mut nb = NewBlock::new(name, content);
        nb.id = Some(id);
        nb.created_at = Some(created_at);
        nb.tags = tags;
        nb.meta = meta;
        nb.trajectory = trajectory;
        nb.priority = priority;
        nb.source = source;
        nb.evictable = flags & 1 != 0;
        nb.tool = flags & 2 != 0;
        nb.gated = flags & 4 == 0;
        nb.token_count = token_count;
        nb.embedding = embedding;
        Ok(nb)
    }
}

/// Decode one entry: its origin and operation. Never panics on any input.
pub fn decode_entry(buf: &[u8]) -> Result<(BlockId, Op)> {
    let mut r = Reader { buf, at: 0 };
    let version = r.u8("the entry header")?;
    if version != VERSION {
        return Err(CoreError::Corrupt(format!(
            "journal entry version {version} (this rampart reads version {VERSION})"
        )));
    }
    let origin = r.id("the entry header")?;
    let tag = r.u8("the entry header")?;
    let op = match tag {
        INSERT => {
            let author = r.id("an insert")?;
            let position = match r.u8("an insert")? {
                0 => None,
                1 => Some(Position::Back),
                2 => Some(Position::Front),
                3 => Some(Position::At(r.i64("an insert")?)),
                p => return Err(corrupt(&format!("bad position marker {p} in an insert"))),
            };
            let n = r.count("an insert's block", 40)?;
            if position.is_some() && n != 1 {
                return Err(corrupt("a positioned insert holds more than one block"));
            }
            let blocks = (0..n).map(|_| r.block()).collect::<Result<_>>()?;
            Op::Insert {
                author,
                position,
                blocks,
            }
        }
        UPDATE_CONTENT => Op::UpdateContent {
            id: r.id("a content update")?,
            content: r.str("a content update")?,
            token_count: r.opt_u32("a content update")?,
            actor: r.id("a content update")?,
        },
        UPDATE_PRIORITY => Op::UpdatePriority {
            id: r.id("a priority update")?,
            priority: r.f64("a priority update")?,
        },
        SET_WRAP => Op::SetWrap {
            id: r.id("a wrap")?,
            wrap: r.wrap("a wrap")?,
        },
        SET_GATED => Op::SetGated {
            id: r.id("a gate flag")?,
            gated: r.flag("a gate flag")?,
        },
        MOVE_TO => Op::MoveTo {
            id: r.id("a move")?,
            position: r.i64("a move")?,
        },
        MOVE_BY => Op::MoveBy {
            id: r.id("a move")?,
            steps: r.i64("a move")?,
        },
        MOVE_NEXT_TO => Op::MoveNextTo {
            id: r.id("a move")?,
            anchor: r.id("a move")?,
            after: r.flag("a move")?,
        },
        PROMOTE_GROUP => Op::PromoteGroup {
            ids: r.ids("a group promote")?,
            position: r.i64("a group promote")?,
        },
        EVICT => Op::Evict {
            id: r.id("an eviction")?,
            force: r.flag("an eviction")?,
            actor: r.id("an eviction")?,
        },
        ROLLBACK => Op::Rollback {
            trajectory: r.str("a rollback")?,
            actor: r.id("a rollback")?,
        },
        EVICT_SCORED => {
            let n = r.count("a scored eviction", 24)?;
            let scored = (0..n)
                .map(|_| Ok((r.id("a scored eviction")?, r.f64("a scored eviction")?)))
                .collect::<Result<_>>()?;
            let limit = if r.flag("a scored eviction")? {
                Some(r.u64("a scored eviction")?)
            } else {
                None
            };
            let threshold = if r.flag("a scored eviction")? {
                Some(r.f64("a scored eviction")?)
            } else {
                None
            };
            Op::EvictScored {
                scored,
                limit,
                threshold,
            }
        }
        RESTORE => {
            let n = r.u64("a restore")? as usize;
            let snapshot = Restored::Bytes(r.take(n, "a restore")?.to_vec());
            Op::Restore {
                snapshot,
                new_ids: r.ids("a restore")?,
                actor: r.id("a restore")?,
            }
        }
        EMBED => {
            let n = r.count("a vector", 33)?;
            let items = (0..n)
                .map(|_| {
                    Ok((
                        r.id("a vector")?,
                        r.u64("a vector")?,
                        r.flag("a vector")?,
                        r.floats("a vector")?,
                    ))
                })
                .collect::<Result<_>>()?;
            Op::Embed { items }
        }
        ACCESS => {
            let n = r.count("an access count", 24)?;
            let deltas = (0..n)
                .map(|_| Ok((r.id("an access count")?, r.u64("an access count")?)))
                .collect::<Result<_>>()?;
            Op::Access { deltas }
        }
        t => return Err(corrupt(&format!("unknown journal operation {t}"))),
    };
    if r.at != buf.len() {
        return Err(corrupt("the journal entry has trailing bytes"));
    }
    Ok((origin, op))
}

// ---- apply ---------------------------------------------------------------------------

impl Registry {
    /// Apply one decoded entry through the ordinary write path. `me` is this
    /// replica's origin id: its own access counts are already counted here.
    pub fn apply(&self, origin: BlockId, op: Op, me: BlockId) -> Result<Outcome> {
        self.apply_op(op, Some((origin, me)))
    }

    /// Apply an operation of a local registry (no journal): the same path as a
    /// replayed entry, without the replica's bookkeeping of published counts.
    pub fn apply_local(&self, op: Op) -> Result<Outcome> {
        self.apply_op(op, None)
    }

    /// `journal`: (the entry's origin, this replica's origin) for a replayed
    /// entry, `None` for a local registry's own call.
    fn apply_op(&self, op: Op, journal: Option<(BlockId, BlockId)>) -> Result<Outcome> {
        Ok(match op {
            Op::Insert {
                author,
                position: Some(position),
                mut blocks,
            } => {
                let nb = blocks.pop().ok_or_else(|| {
                    CoreError::InvalidArgument("a positioned insert holds one block".into())
                })?;
                let id = self.insert(nb, author, position)?;
                if journal.is_some() {
                    self.note_published([(id, 0)]);
                }
                Outcome::Id(id)
            }
            Op::Insert {
                author,
                position: None,
                blocks,
            } => {
                let ids = self.insert_many(blocks, author)?;
                if journal.is_some() {
                    self.note_published(ids.iter().map(|id| (*id, 0)));
                }
                Outcome::Ids(ids)
            }
            Op::UpdateContent {
                id,
                content,
                token_count,
                actor,
            } => {
                self.update_content(id, &content, token_count, actor)?;
                Outcome::Nothing
            }
            Op::UpdatePriority { id, priority } => {
                self.update_priority(id, priority)?;
                Outcome::Nothing
            }
            Op::SetWrap { id, wrap } => {
                self.set_wrap(id, wrap)?;
                Outcome::Nothing
            }
            Op::SetGated { id, gated } => {
                self.set_gated(id, gated)?;
                Outcome::Nothing
            }
            Op::MoveTo { id, position } => Outcome::Index(self.move_to(id, position)?),
            Op::MoveBy { id, steps } => Outcome::Index(self.move_by(id, steps)?),
            Op::MoveNextTo { id, anchor, after } => {
                Outcome::Index(self.move_next_to(id, anchor, after)?)
            }
            Op::PromoteGroup { ids, position } => {
                Outcome::Index(self.promote_group(&ids, position)?)
            }
            Op::Evict { id, force, actor } => Outcome::Evicted(self.evict(id, force, actor)?),
            Op::Rollback { trajectory, actor } => {
                Outcome::Count(self.rollback_trajectory(&trajectory, actor))
            }
            Op::EvictScored {
                scored,
                limit,
                threshold,
            } => Outcome::Ids(self.evict_scored(
                &scored,
                limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
                threshold,
            )?),
            Op::Restore {
                snapshot,
                new_ids,
                actor,
            } => {
                match snapshot {
                    Restored::Taken(snap) => self.restore_as(&snap, new_ids, actor)?,
                    Restored::Bytes(b) => self.restore_journaled(&b, new_ids, actor)?,
                }
                Outcome::Nothing
            }
            Op::Embed { items } => Outcome::Count(self.attach_published(&items)?),
            Op::Access { deltas } => {
                // A replica's own accesses are already counted here.
                if journal.is_some_and(|(origin, me)| origin != me) {
                    self.add_accesses(&deltas);
                }
                Outcome::Nothing
            }
        })
    }

    fn restore_journaled(
        &self,
        snapshot: &[u8],
        new_ids: Vec<BlockId>,
        actor: BlockId,
    ) -> Result<()> {
        let (saved, old_ids) = decode_checkpoint(snapshot)?;
        self.check_snapshot_of(saved.registry)?;
        let mut entries = Vec::with_capacity(saved.blocks.len());
        let mut counts = Vec::with_capacity(saved.blocks.len());
        let mut vectors = Vec::with_capacity(saved.blocks.len());
        for (mut sb, id) in saved.blocks.into_iter().zip(old_ids) {
            vectors.push(sb.block.embedding.take().map(|v| (v, sb.truncated)));
            sb.block.id = Some(id);
            let tokens = sb.block.token_count.unwrap_or(0);
            let access = sb.access;
            counts.push(access);
            let b = Block::restored(sb.block, sb.author, tokens, sb.created_at, access, sb.wrap);
            entries.push((Arc::new(b), access));
        }
        let published: Vec<(BlockId, u64)> = new_ids.iter().copied().zip(counts).collect();
        self.restore_blocks(entries, new_ids, None, Some(vectors), actor)?;
        // The restored counts are in the entry: the journal's, not this replica's.
        self.note_published(published);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(name: &str) -> NewBlock {
        let mut nb = NewBlock::new(name, format!("content of {name}"));
        nb.token_count = Some(3);
        nb
    }

    fn replay(entries: &[Vec<u8>], r: &Registry, me: BlockId) -> Vec<Result<Outcome>> {
        entries
            .iter()
            .map(|e| decode_entry(e).and_then(|(origin, op)| r.apply(origin, op, me)))
            .collect()
    }

    fn state(r: &Registry) -> Vec<(String, String, u64, f64)> {
        r.order()
            .iter()
            .map(|b| {
                (
                    b.id.to_hyphenated(),
                    b.content().to_string(),
                    b.access_count(),
                    b.priority,
                )
            })
            .collect()
    }

    #[test]
    fn replicas_of_one_journal_agree() {
        let id = BlockId::random();
        let (a, b) = (Registry::with_id("a", id), Registry::with_id("a", id));
        let (me_a, me_b) = (BlockId::random(), BlockId::random());
        let mut blocks = vec![block("x"), block("y"), block("z")];
        stamp(&mut blocks);
        let ids: Vec<BlockId> = blocks.iter().map(|b| b.id.unwrap()).collect();
        let mut entries = vec![encode_entry(
            me_a,
            &Op::Insert {
                author: id,
                position: None,
                blocks,
            },
        )];
        entries.push(encode_entry(
            me_b,
            &Op::MoveTo {
                id: ids[2],
                position: 0,
            },
        ));
        entries.push(encode_entry(
            me_a,
            &Op::UpdatePriority {
                id: ids[1],
                priority: 0.9,
            },
        ));
        // Fails the same way everywhere: not evictable without force.
        let mut pinned = vec![block("pin")];
        pinned[0].evictable = false;
        pinned[0].source = Source::Orchestrator;
        stamp(&mut pinned);
        let pin = pinned[0].id.unwrap();
        entries.push(encode_entry(
            me_b,
            &Op::Insert {
                author: BlockId::random(),
                position: Some(Position::Front),
                blocks: pinned,
            },
        ));
        entries.push(encode_entry(
            me_b,
            &Op::Evict {
                id: pin,
                force: true,
                actor: id,
            },
        ));
        entries.push(encode_entry(
            me_b,
            &Op::Access {
                deltas: vec![(ids[0], 5)],
            },
        ));
        entries.push(vec![1, 2, 3]); // garbage: skipped by everyone
        let out_a = replay(&entries, &a, me_a);
        let out_b = replay(&entries, &b, me_b);
        assert!(matches!(out_a[4], Err(CoreError::Permission(_))));
        assert!(out_a[6].is_err() && out_b[6].is_err());
        assert_eq!(out_a.len(), out_b.len());
        // Same state, except the access counts B counted itself (already local).
        let (sa, sb) = (state(&a), state(&b));
        assert_eq!(sa.len(), 4);
        assert_eq!(sa[0].0, pin.to_hyphenated());
        assert_eq!(sa[1].0, ids[2].to_hyphenated());
        assert_eq!(
            sa.iter().map(|s| &s.0).collect::<Vec<_>>(),
            sb.iter().map(|s| &s.0).collect::<Vec<_>>()
        );
        assert_eq!(a.get(ids[0]).unwrap().access_count(), 5);
        assert_eq!(b.get(ids[0]).unwrap().access_count(), 0);
    }

    #[test]
    fn decoder_rejects_garbage_without_panicking() {
        let mut blocks = vec![block("x")];
        stamp(&mut blocks);
        let good = encode_entry(
            BlockId::random(),
            &Op::Insert {
                author: BlockId::random(),
                position: Some(Position::At(3)),
                blocks,
            },
        );
        assert!(decode_entry(&good).is_ok());
        for cut in 0..good.len() {
            assert!(decode_entry(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode_entry(&longer).is_err());
        let mut newer = good.clone();
        newer[0] = 2;
        assert!(decode_entry(&newer).is_err());
        // Flip every byte: decoding may succeed or fail, never panic.
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0xff;
            let _ = decode_entry(&bad);
        }
    }

    #[test]
    fn checkpoint_keeps_ids_and_restore_replays() {
        let id = BlockId::random();
        let r = Registry::with_id("r", id);
        let mut blocks = vec![block("a"), block("b")];
        stamp(&mut blocks);
        let ids = r.insert_many(blocks, id).unwrap();
        let snap = r.snapshot();
        let bytes = r.checkpoint_bytes("{}");
        let (saved, got) = decode_checkpoint(&bytes).unwrap();
        assert_eq!(got, ids);
        let copy = Registry::with_id("r", id);
        copy.install_as(saved, Some(got)).unwrap();
        assert_eq!(state(&copy), state(&r));
        r.evict(ids[0], false, id).unwrap();
        let new_ids = vec![BlockId::random(), BlockId::random()];
        let op = Op::Restore {
            snapshot: Restored::Taken(Box::new(snap)),
            new_ids: new_ids.clone(),
            actor: id,
        };
        let (origin, op) = decode_entry(&encode_entry(id, &op)).unwrap();
        r.apply(origin, op, id).unwrap();
        assert_eq!(r.order().iter().map(|b| b.id).collect::<Vec<_>>(), new_ids);
    }
}
