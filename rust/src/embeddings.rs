//! Block embeddings for the relevance gate: one float32 matrix per registry,
//! scored with SIMD dot products, with an optional int8 copy for large registries.
//!
//! Layout. Rows live in fixed segments of `SEGMENT_ROWS` contiguous rows, each
//! behind an `Arc`. A compile clones the segment list (one refcount per 1 024
//! blocks) under the read lock and scores with no lock held; a write that finds
//! its segment shared (a compile or a snapshot still reading it) copies that one
//! segment first. So snapshots keep their vectors for the price of a pointer
//! each, and a write after a snapshot copies 1.5 MB, not the whole matrix.
//!
//! Blocks point at their row (`Block::row`). Every row also records which text
//! it describes (`owner` = `Block::text_key` of the version embedded), so a block
//! whose row was handed out again after a restore is recognised as unembedded
//! instead of being scored against somebody else's vector.
//!
//! Quantised mode keeps an int8 copy of every row (symmetric, one scale per
//! row) next to the float32 rows. A gated compile then scans the int8 copy (a
//! quarter of the memory traffic) and re-scores with float32 only the rows
//! whose error bound could reach the cut, so the admitted set equals the
//! float32 one exactly (see `Quantised::bound`).

use std::borrow::Cow;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use crate::block::{Block, MAX_ROWS};
use crate::error::{CoreError, Result};

/// Rows per segment: 1.5 MB of float32 at 384 dimensions.
pub const SEGMENT_ROWS: usize = 1024;
/// From this many rows a scan may be shared with helper threads: spawning one
/// costs ~20-50 µs, and an 8 192-row scan takes ~0.7 ms on one core.
const PARALLEL_ROWS: usize = 8_192;
/// At most this many threads per scan, the caller's included: the scan is
/// memory-bound, and a few cores already saturate the memory bus.
const MAX_SCAN_THREADS: usize = 4;

#[derive(Clone, Debug)]
struct Segment {
    data: Box<[f32]>,
    /// `Block::text_key` of the version each row describes (0: never used).
    owner: Box<[usize]>,
    q8: Option<Box<[i8]>>,
    /// Per row: the int8 scale, and the L1 norm of the dequantised row.
    qscale: Option<Box<[f32]>>,
    ql1: Option<Box<[f32]>>,
}

impl Segment {
    fn new(dim: usize, quantised: bool) -> Segment {
        let mut s = Segment {
            data: vec![0.0; SEGMENT_ROWS * dim].into_boxed_slice(),
            owner: vec![0; SEGMENT_ROWS].into_boxed_slice(),
            q8: None,
            qscale: None,
            ql1: None,
        };
        if quantised {
            s.quantise_all(dim);
        }
        s
    }

    fn quantise_all(&mut self, dim: usize) {
        let mut q8 = vec![0i8; SEGMENT_ROWS * dim].into_boxed_slice();
        let mut scale = vec![0f32; SEGMENT_ROWS].into_boxed_slice();
        let mut l1 = vec![0f32; SEGMENT_ROWS].into_boxed_slice();
        for r in 0..SEGMENT_ROWS {
            let (s, n) = quantise(
                &self.data[r * dim..(r + 1) * dim],
                &mut q8[r * dim..(r + 1) * dim],
            );
            scale[r] = s;
            l1[r] = n;
        }
        self.q8 = Some(q8);
        self.qscale = Some(scale);
        self.ql1 = Some(l1);
    }

    fn write(&mut self, r: usize, dim: usize, v: &[f32], owner: usize) {
        self.data[r * dim..(r + 1) * dim].copy_from_slice(v);
        self.owner[r] = owner;
        if let (Some(q8), Some(scale), Some(l1)) = (&mut self.q8, &mut self.qscale, &mut self.ql1) {
            let (s, n) = quantise(v, &mut q8[r * dim..(r + 1) * dim]);
            scale[r] = s;
            l1[r] = n;
        }
    }
}

/// `v` scaled to unit length, so a dot product is the cosine (a zero vector stays
/// zero and scores 0). Vectors already unit length (MiniLM's) come back as they are.
pub fn normalised(v: &[f32]) -> Cow<'_, [f32]> {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 || (norm - 1.0).abs() < 1e-6 {
        return Cow::Borrowed(v);
    }
    Cow::Owned(v.iter().map(|x| (f64::from(*x) / norm) as f32).collect())
}

/// Symmetric int8 quantisation of `v` into `out`; returns (scale, L1 norm of the
/// dequantised vector). Values round to the nearest step, so each component is
/// off by at most `scale / 2`.
fn quantise(v: &[f32], out: &mut [i8]) -> (f32, f32) {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        out.fill(0);
        return (0.0, 0.0);
    }
    let scale = max / 127.0;
    let inv = 1.0 / scale;
    let mut l1: i64 = 0;
    for (o, x) in out.iter_mut().zip(v) {
        let q = (x * inv).round().clamp(-127.0, 127.0) as i8;
        l1 += i64::from(q.unsigned_abs());
        *o = q;
    }
    (scale, scale * l1 as f32)
}

/// The registry's embedding matrix.
#[derive(Clone, Debug, Default)]
pub struct Embeddings {
    dim: usize,
    segments: Vec<Arc<Segment>>,
    /// Rows handed out so far (high-water mark); freed ones wait in `free`.
    rows: u32,
    free: Vec<u32>,
    quantised: bool,
}

/// A consistent, lock-free view of the matrix for scoring.
#[derive(Clone, Debug)]
pub struct MatrixView {
    dim: usize,
    segments: Vec<Arc<Segment>>,
    rows: usize,
    quantised: bool,
}

impl Embeddings {
    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn rows_in_use(&self) -> usize {
        self.rows as usize - self.free.len()
    }
    pub fn quantised(&self) -> bool {
        self.quantised
    }
    /// Bytes held by the matrix (float32 rows, owners, int8 copy).
    pub fn bytes(&self) -> usize {
        let per_row = self.dim * 4 + 8 + if self.quantised { self.dim + 8 } else { 0 };
        self.segments.len() * SEGMENT_ROWS * per_row
    }

    /// Check a vector against the matrix's dimension (fixed by the first vector
    /// stored; free again once no row is in use).
    pub fn check_dim(&self, len: usize, what: &str, registry: &str) -> Result<()> {
        if len == 0 {
            return Err(CoreError::InvalidArgument(format!("{what} is empty")));
        }
        if self.dim != 0 && self.rows_in_use() > 0 && len != self.dim {
            return Err(CoreError::InvalidArgument(format!(
                "{what} has {len} dimensions; registry '{registry}' holds \
                 {}-dimensional embeddings",
                self.dim
            )));
        }
        Ok(())
    }

    /// Store `v` as the vector of `block` (the current version) and point the
    /// block at it. The caller holds the registry's write lock and has checked
    /// the dimension.
    pub fn attach(&mut self, block: &Block, v: &[f32], truncated: bool) -> Result<()> {
        if self.rows_in_use() == 0 && self.dim != v.len() {
            *self = Embeddings {
                quantised: self.quantised,
                ..Embeddings::default()
            };
            self.dim = v.len();
        }
        let row = match block.row() {
            // Same text re-embedded (e.g. a caller's explicit vector): reuse the row.
            Some(r) if self.owns(r, block) => r,
            _ => self.allocate()?,
        };
        let (s, r) = (row as usize / SEGMENT_ROWS, row as usize % SEGMENT_ROWS);
        let unit = normalised(v);
        Arc::make_mut(&mut self.segments[s]).write(r, self.dim, &unit, block.text_key());
        block.set_row(Some(row), truncated);
        Ok(())
    }

    fn allocate(&mut self) -> Result<u32> {
        if let Some(r) = self.free.pop() {
            return Ok(r);
        }
        if self.rows >= MAX_ROWS {
            return Err(CoreError::InvalidArgument(
                "the embedding matrix is full (2^31 - 1 rows)".into(),
            ));
        }
        let r = self.rows;
        if r as usize == self.segments.len() * SEGMENT_ROWS {
            self.segments
                .push(Arc::new(Segment::new(self.dim, self.quantised)));
        }
        self.rows += 1;
        Ok(r)
    }

    /// Whether row `r` holds the vector of `block`'s text.
    pub fn owns(&self, r: u32, block: &Block) -> bool {
        let (s, i) = (r as usize / SEGMENT_ROWS, r as usize % SEGMENT_ROWS);
        r < self.rows && self.segments[s].owner[i] == block.text_key()
    }

    /// Give back the row of a block leaving the registry (or changing its text).
    /// The data stays until the row is reused, so a snapshot sharing the
    /// segment still reads it.
    pub fn release(&mut self, block: &Block) {
        // A live block owns its row alone (texts are never shared between
        // blocks), so each row comes back here once.
        if let Some(r) = block.row() {
            if self.owns(r, block) {
                self.free.push(r);
            }
        }
    }

    /// The vector of `block`, if the matrix holds one for its text.
    pub fn vector(&self, block: &Block) -> Option<&[f32]> {
        let r = block.row()?;
        self.owns(r, block).then(|| {
            let (s, i) = (r as usize / SEGMENT_ROWS, r as usize % SEGMENT_ROWS);
            &self.segments[s].data[i * self.dim..(i + 1) * self.dim]
        })
    }

    /// Turn the int8 copy on or off.
    pub fn set_quantised(&mut self, on: bool) {
        if on == self.quantised {
            return;
        }
        self.quantised = on;
        let dim = self.dim;
        for seg in &mut self.segments {
            let seg = Arc::make_mut(seg);
            if on {
                seg.quantise_all(dim);
            } else {
                seg.q8 = None;
                seg.qscale = None;
                seg.ql1 = None;
            }
        }
    }

    pub fn view(&self) -> MatrixView {
        MatrixView {
            dim: self.dim,
            segments: self.segments.clone(),
            rows: self.rows as usize,
            quantised: self.quantised,
        }
    }
}

impl MatrixView {
    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn row(&self, r: u32) -> &[f32] {
        let (s, i) = (r as usize / SEGMENT_ROWS, r as usize % SEGMENT_ROWS);
        &self.segments[s].data[i * self.dim..(i + 1) * self.dim]
    }

    /// Cosine (dot) score of every row against `q`, indexed by row.
    pub fn score_rows(&self, q: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; self.rows];
        let dim = self.dim;
        self.for_segments(&mut out, |seg, out| {
            scan(&seg.data[..out.len() * dim], dim, q, out)
        });
        out
    }

    /// Per row, from the int8 copy: a lower and an upper bound of the exact
    /// (float32) score against `q`.
    fn bounds_q8(&self, q: &Quantised) -> Vec<[f32; 2]> {
        let mut out = vec![[0f32; 2]; self.rows];
        let dim = self.dim;
        self.for_segments(&mut out, |seg, out| {
            let q8 = seg.q8.as_deref().expect("quantised segment");
            let scale = seg.qscale.as_deref().expect("quantised segment");
            let l1 = seg.ql1.as_deref().expect("quantised segment");
            for (r, o) in out.iter_mut().enumerate() {
                let approx =
                    dot_i8(&q8[r * dim..(r + 1) * dim], &q.values) as f32 * (q.scale * scale[r]);
                let b = q.bound(scale[r], l1[r], dim);
                *o = [approx - b, approx + b];
            }
        });
        out
    }

    /// Run `f(segment, its slice of out)` over all segments: on the caller's thread
    /// alone for small matrices, else with a few helper threads too (the scan is
    /// memory-bound; one core does not saturate the memory bus).
    ///
    /// Why threads started per call and not a pool (rayon's, as before): a pool's
    /// workers do not survive `fork()`, so a forked child (multiprocessing workers,
    /// pre-fork servers) that scans after its parent started the pool waits forever
    /// for them. Threads that serve one call cannot be lost that way, and they never
    /// spin between calls against numpy's or onnxruntime's pools. A pool of our
    /// own, parked on a condition variable and re-made in a forked child (pid
    /// check), was tried: no faster within the noise of a loaded 2-core machine
    /// (gate after an onnxruntime and a numpy call, 1.3-1.4× numpy either way), so
    /// the simpler per-call threads stay.
    ///
    /// Why the caller never waits for a helper to start: on a busy machine a new
    /// thread may wait milliseconds for a core. The caller scans too, every thread
    /// claims one segment at a time, and the caller waits only for segments a helper
    /// has claimed (at most one each, ~0.1 ms). A helper that starts after the scan
    /// is over finds nothing left to claim and exits. So helpers speed the scan up
    /// when cores are idle and cost ~20 µs each to start when none is.
    fn for_segments<T: Send, F: Fn(&Segment, &mut [T]) + Sync>(&self, out: &mut [T], f: F) {
        self.for_segments_on(scan_threads(self.rows), out, f)
    }

    fn for_segments_on<T: Send, F: Fn(&Segment, &mut [T]) + Sync>(
        &self,
        threads: usize,
        out: &mut [T],
        f: F,
    ) {
        let parts: Vec<(&Segment, *mut T, usize)> = self
            .segments
            .iter()
            .zip(out.chunks_mut(SEGMENT_ROWS))
            .map(|(s, o)| (&**s, o.as_mut_ptr(), o.len()))
            .collect();
        let total = parts.len();
        let job = Job { parts, f: &f };
        if threads <= 1 || total <= 1 {
            for i in 0..total {
                // SAFETY: each index once, on this thread, while `out` is borrowed.
                unsafe { run_part::<T, F>(&job as *const Job<'_, T, F> as *const (), i) };
            }
            return;
        }
        let progress = Arc::new(Progress::default());
        let job_addr = &job as *const Job<'_, T, F> as usize;
        let run: unsafe fn(*const (), usize) = run_part::<T, F>;
        for _ in 1..threads {
            let p = Arc::clone(&progress);
            // A failed spawn (a thread limit reached) only means fewer helpers.
            let _ = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || p.work(total, job_addr, run));
        }
        progress.work(total, job_addr, run);
        // Only segments a helper claimed can still be in progress.
        let mut spins = 0u32;
        while progress.done.load(AtomicOrdering::Acquire) < total {
            if spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
        // `job` may be dropped now: every index below `total` is claimed and
        // finished, so no helper will read it again.
        assert!(
            !progress.panicked.load(AtomicOrdering::Relaxed),
            "a gate scan thread panicked"
        );
    }
}

/// One scan's segments, output slices and function, on the caller's stack.
struct Job<'a, T, F> {
    parts: Vec<(&'a Segment, *mut T, usize)>,
    f: &'a F,
}

/// Scan part `i` of the `Job` at `job`.
///
/// # Safety
/// `job` points to a live `Job<T, F>`, and each `i < parts.len()` is passed
/// once in all (the output slices are disjoint, so each is written by one thread).
unsafe fn run_part<T, F: Fn(&Segment, &mut [T])>(job: *const (), i: usize) {
    // SAFETY: the caller's contract above.
    let job = unsafe { &*(job as *const Job<'_, T, F>) };
    let (seg, ptr, len) = job.parts[i];
    // SAFETY: part `i`'s slice of `out`, handed to this call alone.
    (job.f)(seg, unsafe { std::slice::from_raw_parts_mut(ptr, len) });
}

/// What the threads of one scan share. It lives in an `Arc`, so a helper that
/// starts after the scan has returned still finds it, and finds no work in it.
#[derive(Default)]
struct Progress {
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
}

impl Progress {
    /// Claim and scan parts until none is left.
    fn work(&self, total: usize, job: usize, run: unsafe fn(*const (), usize)) {
        loop {
            let i = self.next.fetch_add(1, AtomicOrdering::Relaxed);
            if i >= total {
                return;
            }
            // SAFETY: `i < total` was claimed by this thread alone, and the
            // caller does not return (nor drop the job) until `done` reaches
            // `total`, which this part's increment below is needed for. A panic
            // is caught so that the increment always happens.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
                run(job as *const (), i)
            }));
            if ran.is_err() {
                self.panicked.store(true, AtomicOrdering::Relaxed);
            }
            self.done.fetch_add(1, AtomicOrdering::Release);
        }
    }
}

/// Threads for one scan of `rows` rows, the caller's included: 1 below
/// `PARALLEL_ROWS`; else one per core this process may use, at most one per
/// 4 096 rows and `MAX_SCAN_THREADS`. Whether those cores are idle needs no
/// guess: a helper that gets no core does no work (see `for_segments`).
fn scan_threads(rows: usize) -> usize {
    if rows < PARALLEL_ROWS {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let by_size = rows / (PARALLEL_ROWS / 2);
    cores.min(by_size).clamp(1, MAX_SCAN_THREADS)
}

/// A query quantised like the rows, with what its error bound needs.
struct Quantised {
    values: Vec<i8>,
    scale: f32,
    l1: f32,
}

impl Quantised {
    fn new(q: &[f32]) -> Quantised {
        let mut values = vec![0i8; q.len()];
        let (scale, l1) = quantise(q, &mut values);
        Quantised { values, scale, l1 }
    }
    /// Upper bound of |q·x - approx| for a row with this scale and L1 norm.
    /// With q = q' + e and x = x' + d (|e_i| <= s_q/2, |d_i| <= s_x/2):
    /// q·x - q'·x' = q'·d + e·x' + e·d, bounded by the three terms below. A small
    /// relative slack covers float32 rounding of the scores themselves.
    fn bound(&self, scale: f32, l1: f32, dim: usize) -> f32 {
        let b =
            0.5 * scale * self.l1 + 0.5 * self.scale * l1 + 0.25 * dim as f32 * self.scale * scale;
        b * 1.001 + 1e-6
    }
}

/// The gate's per-position inputs for one order: the matrix row of each position
/// and the positions of ungated blocks (`Block::gated == false`), which the gate
/// admits without counting them toward `top_k`. Cached per generation by the
/// registry, so finding the ungated blocks costs nothing per compile.
pub struct GateRows {
    pub rows: Vec<u32>,
    pub ungated: Vec<u32>,
}

/// Maps positions of an order to matrix rows; `Err(missing)` if some block has
/// no vector (the caller embeds it first).
pub fn rows_of(order: &[Arc<Block>]) -> std::result::Result<GateRows, usize> {
    let mut rows = Vec::with_capacity(order.len());
    let mut ungated = Vec::new();
    let mut missing = 0;
    for (i, b) in order.iter().enumerate() {
        match b.row() {
            Some(r) => rows.push(r),
            None => missing += 1,
        }
        if !b.gated {
            ungated.push(i as u32);
        }
    }
    if missing > 0 {
        Err(missing)
    } else {
        Ok(GateRows { rows, ungated })
    }
}

/// Result of the cosine gate over one order.
pub struct Scored {
    /// Score per position (exact float32 for every block that could be
    /// admitted; in quantised mode, the int8 estimate for the rest).
    pub scores: Vec<f64>,
    pub admitted: Vec<bool>,
}

/// Stage 1 with the built-in cosine gate: score every block of the order
/// (`g.rows[i]` is the row of position i) and admit those with score >=
/// `threshold` and among the `top_k` best (ties in registry order). With
/// `keep_ungated`, the ungated positions are admitted whatever their score and
/// take no place among the `top_k` (compile); without it they rank like any
/// other block (`find_relevant`).
pub fn cosine_gate(
    m: &MatrixView,
    g: &GateRows,
    q: &[f32],
    threshold: Option<f64>,
    top_k: Option<usize>,
    keep_ungated: bool,
) -> Scored {
    let rows = &g.rows;
    // Positions the cut must not see (usually none: then no mask is built).
    let skip: Option<Vec<bool>> = (keep_ungated && !g.ungated.is_empty()).then(|| {
        let mut m = vec![false; rows.len()];
        for &p in &g.ungated {
            m[p as usize] = true;
        }
        m
    });
    let skipped = |i: usize| skip.as_ref().is_some_and(|m| m[i]);
    if !m.quantised {
        let by_row = m.score_rows(q);
        let scores: Vec<f64> = rows
            .iter()
            .map(|&r| f64::from(by_row[r as usize]))
            .collect();
        let mut admitted = match &skip {
            None => admit_scores(&scores, threshold, top_k),
            Some(mask) => {
                let pool: Vec<f64> = scores
                    .iter()
                    .zip(mask)
                    .map(|(&s, &u)| if u { f64::NEG_INFINITY } else { s })
                    .collect();
                admit_scores(&pool, threshold, top_k)
            }
        };
        for &p in skip.as_ref().map_or(&[][..], |_| &g.ungated[..]) {
            admitted[p as usize] = true;
        }
        return Scored { scores, admitted };
    }
    let qq = Quantised::new(q);
    let bounds = m.bounds_q8(&qq);
    let n = rows.len();
    let estimate = |r: u32| {
        let [lo, hi] = bounds[r as usize];
        f64::from(lo) * 0.5 + f64::from(hi) * 0.5
    };
    let gated_n = n - skip.as_ref().map_or(0, |_| g.ungated.len());
    // The cut no exact score of an admitted block can be below: the threshold,
    // raised to the k-th best lower bound (k blocks are surely at least that).
    let mut cut = threshold.unwrap_or(f64::NEG_INFINITY);
    if let Some(k) = top_k {
        if k > 0 && k <= gated_n {
            let lows = rows
                .iter()
                .enumerate()
                .filter(|(i, _)| !skipped(*i))
                .map(|(_, &r)| bounds[r as usize][0]);
            cut = cut.max(f64::from(kth_largest(lows, k)));
        }
    }
    // Candidates: every block whose exact score could reach the cut, re-scored
    // in float32. The rest can be neither above the threshold nor among the k
    // best. Ungated blocks are scored exactly (the report shows their score).
    let mut scores = Vec::with_capacity(n);
    let mut candidates: Vec<u32> = Vec::new();
    for (i, &r) in rows.iter().enumerate() {
        if skipped(i) {
            scores.push(f64::from(dot(m.row(r), q)));
        } else if top_k != Some(0) && f64::from(bounds[r as usize][1]) >= cut {
            candidates.push(i as u32);
            scores.push(f64::from(dot(m.row(r), q)));
        } else {
            scores.push(estimate(r));
        }
    }
    // Admission among the candidates only (in position order, so ties still go
    // to the lower position).
    let exact: Vec<f64> = candidates.iter().map(|&i| scores[i as usize]).collect();
    let mut admitted = vec![false; n];
    for (&i, a) in candidates
        .iter()
        .zip(admit_scores(&exact, threshold, top_k))
    {
        admitted[i as usize] = a;
    }
    for &p in skip.as_ref().map_or(&[][..], |_| &g.ungated[..]) {
        admitted[p as usize] = true;
    }
    Scored { scores, admitted }
}

/// The k-th largest of `values` (1 <= k <= count). A bounded heap of order keys:
/// almost every value is rejected by one comparison with the heap's minimum.
fn kth_largest(values: impl Iterator<Item = f32>, k: usize) -> f32 {
    use std::cmp::Reverse;
    // Order-preserving map of f32 to u32 (total order, NaN-free input).
    fn key(x: f32) -> u32 {
        let b = x.to_bits();
        if b >> 31 == 1 {
            !b
        } else {
            b | 0x8000_0000
        }
    }
    fn value(k: u32) -> f32 {
        f32::from_bits(if k >> 31 == 1 { k & 0x7fff_ffff } else { !k })
    }
    let mut heap: BinaryHeap<Reverse<u32>> = BinaryHeap::with_capacity(k + 1);
    for x in values {
        let kx = key(x);
        if heap.len() < k {
            heap.push(Reverse(kx));
        } else if kx > heap.peek().expect("k >= 1").0 {
            heap.pop();
            heap.push(Reverse(kx));
        }
    }
    value(heap.peek().expect("k >= 1").0)
}

/// Admission by scores: >= threshold, then the top_k best (ties: lower position).
pub fn admit_scores(scores: &[f64], threshold: Option<f64>, top_k: Option<usize>) -> Vec<bool> {
    let mut admitted: Vec<bool> = match threshold {
        Some(t) => scores.iter().map(|&s| s >= t).collect(),
        None => vec![true; scores.len()],
    };
    if let Some(k) = top_k {
        let masked: Vec<f64>;
        let pool = if threshold.is_some() {
            masked = scores
                .iter()
                .zip(&admitted)
                .map(|(&s, &a)| if a { s } else { f64::NEG_INFINITY })
                .collect();
            &masked
        } else {
            scores
        };
        let eligible = admitted.iter().filter(|&&a| a).count();
        if eligible > k {
            let keep = top_k_positions(pool, k);
            admitted.fill(false);
            for i in keep {
                admitted[i as usize] = true;
            }
        }
    }
    admitted
}

#[derive(PartialEq)]
struct Ranked(f64, u32);
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    /// Better = higher score, then lower position; the heap keeps the worst on top.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.0.total_cmp(&self.0).then(self.1.cmp(&other.1))
    }
}

/// Positions of the `k` best scores (higher first, ties by position), unordered.
/// A bounded heap for small k (one pass, almost every score rejected by one
/// comparison), partial selection otherwise.
pub fn top_k_positions(scores: &[f64], k: usize) -> Vec<u32> {
    let n = scores.len();
    if k == 0 {
        return Vec::new();
    }
    if k >= n {
        return (0..n as u32).collect();
    }
    if k <= n / 32 {
        let mut heap: BinaryHeap<Ranked> = BinaryHeap::with_capacity(k + 1);
        for (i, &s) in scores.iter().enumerate() {
            let r = Ranked(s, i as u32);
            if heap.len() < k {
                heap.push(r);
            } else if r < *heap.peek().unwrap() {
                heap.pop();
                heap.push(r);
            }
        }
        return heap.into_iter().map(|r| r.1).collect();
    }
    let mut idx: Vec<u32> = (0..n as u32).collect();
    idx.select_nth_unstable_by(k - 1, |&a, &b| {
        scores[b as usize]
            .total_cmp(&scores[a as usize])
            .then(a.cmp(&b))
    });
    idx.truncate(k);
    idx
}

// ---- dot products ----------------------------------------------------------------

/// Dot product of two equal-length float32 vectors. The same code scores a
/// full scan and a re-rank, so both give bit-identical scores.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        if simd::has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
            return unsafe { simd::dot_avx2(a, b) };
        }
    }
    dot_portable(a, b)
}

/// Eight independent partial sums: the compiler vectorises this on any target
/// (NEON on aarch64) and it breaks the add dependency chain.
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// `out[r] = dot(row r of data, q)` for consecutive rows, bit-identical to `dot`.
fn scan(data: &[f32], dim: usize, q: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if simd::has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
            unsafe { simd::scan_avx2(data, dim, q, out) };
            return;
        }
    }
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot_portable(&data[r * dim..(r + 1) * dim], q);
    }
}

#[inline]
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    {
        if simd::has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 (checked at run time).
            return unsafe { simd::dot_i8_avx2(a, b) };
        }
    }
    a.iter()
        .zip(b)
        .map(|(&x, &y)| i32::from(x) * i32::from(y))
        .sum()
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    pub fn has_avx2_fma() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// Four 8-lane FMA accumulators over 32 floats per step.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (all loads): i + 32 <= n, or i + 8 <= n below.
        while i + 32 <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_ps(pa.add(i + 8 * j));
                let y = _mm256_loadu_ps(pb.add(i + 8 * j));
                *a = _mm256_fmadd_ps(x, y, *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            let x = _mm256_loadu_ps(pa.add(i));
            let y = _mm256_loadu_ps(pb.add(i));
            acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
            i += 8;
        }
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut s = hsum(v);
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }

    /// Two rows per pass over `q` (each `q` load serves both rows), with the
    /// very accumulation order of `dot_avx2`, so scan and re-score agree to the bit.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn scan_avx2(data: &[f32], dim: usize, q: &[f32], out: &mut [f32]) {
        let rows = out.len();
        assert!(data.len() >= rows * dim && q.len() == dim);
        let pq = q.as_ptr();
        let mut r = 0;
        while r + 2 <= rows && dim % 8 == 0 {
            let pa = data.as_ptr().add(r * dim);
            let pb = pa.add(dim);
            let mut a = [_mm256_setzero_ps(); 4];
            let mut b = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            // SAFETY (all loads): i + 32 <= dim, or i + 8 <= dim below, within
            // rows r and r + 1 of `data` (asserted above) and within `q`.
            while i + 32 <= dim {
                for j in 0..4 {
                    let y = _mm256_loadu_ps(pq.add(i + 8 * j));
                    a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8 * j)), y, a[j]);
                    b[j] = _mm256_fmadd_ps(_mm256_loadu_ps(pb.add(i + 8 * j)), y, b[j]);
                }
                i += 32;
            }
            while i + 8 <= dim {
                let y = _mm256_loadu_ps(pq.add(i));
                a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), y, a[0]);
                b[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pb.add(i)), y, b[0]);
                i += 8;
            }
            let va = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
            let vb = _mm256_add_ps(_mm256_add_ps(b[0], b[1]), _mm256_add_ps(b[2], b[3]));
            out[r] = hsum(va);
            out[r + 1] = hsum(vb);
            r += 2;
        }
        while r < rows {
            out[r] = dot_avx2(&data[r * dim..(r + 1) * dim], q);
            r += 1;
        }
    }

    /// int8 dot: |b| (unsigned) times a with b's sign, pairwise into i16
    /// (`maddubs`; |values| <= 127 so no pair saturates), then into i32.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_i8_avx2(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        while i + 32 <= n {
            // SAFETY: i + 32 <= n.
            let x = _mm256_loadu_si256(pa.add(i) as *const __m256i);
            let y = _mm256_loadu_si256(pb.add(i) as *const __m256i);
            let prod = _mm256_maddubs_epi16(_mm256_abs_epi8(y), _mm256_sign_epi8(x, y));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(prod, ones));
            i += 32;
        }
        let lo = _mm256_castsi256_si128(acc);
        let hi = _mm256_extracti128_si256(acc, 1);
        let s = _mm_add_epi32(lo, hi);
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        let mut total = _mm_cvtsi128_si32(s);
        while i < n {
            total += i32::from(*pa.add(i)) * i32::from(*pb.add(i));
            i += 1;
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    #[test]
    fn simd_dot_matches_portable() {
        let mut s = 7;
        for n in [1, 7, 8, 31, 32, 33, 384, 768, 1000] {
            let a: Vec<f32> = (0..n).map(|_| lcg(&mut s)).collect();
            let b: Vec<f32> = (0..n).map(|_| lcg(&mut s)).collect();
            let exact: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            assert!((f64::from(dot(&a, &b)) - exact).abs() < 1e-4, "n={n}");
            assert!((f64::from(dot_portable(&a, &b)) - exact).abs() < 1e-4);
            let qa: Vec<i8> = a.iter().map(|x| (x * 127.0) as i8).collect();
            let qb: Vec<i8> = b.iter().map(|x| (x * 127.0) as i8).collect();
            let e: i32 = qa
                .iter()
                .zip(&qb)
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum();
            assert_eq!(dot_i8(&qa, &qb), e);
        }
    }

    #[test]
    fn scan_equals_dot_to_the_bit() {
        let mut s = 5;
        for dim in [3, 8, 16, 40, 384, 768] {
            let rows = 7;
            let data: Vec<f32> = (0..rows * dim).map(|_| lcg(&mut s)).collect();
            let q: Vec<f32> = (0..dim).map(|_| lcg(&mut s)).collect();
            let mut out = vec![0f32; rows];
            scan(&data, dim, &q, &mut out);
            for r in 0..rows {
                assert_eq!(
                    out[r].to_bits(),
                    dot(&data[r * dim..(r + 1) * dim], &q).to_bits()
                );
            }
        }
    }

    #[test]
    fn quantisation_error_stays_inside_the_bound() {
        let mut s = 11;
        let dim = 384;
        for _ in 0..200 {
            let x: Vec<f32> = (0..dim).map(|_| lcg(&mut s)).collect();
            let q: Vec<f32> = (0..dim).map(|_| lcg(&mut s) * 0.1).collect();
            let mut x8 = vec![0i8; dim];
            let (sx, l1) = quantise(&x, &mut x8);
            let qq = Quantised::new(&q);
            let approx = dot_i8(&x8, &qq.values) as f32 * sx * qq.scale;
            let err = (dot(&x, &q) - approx).abs();
            assert!(err <= qq.bound(sx, l1, dim), "{err}");
        }
    }

    #[test]
    fn kth_largest_matches_sorting() {
        let mut s = 9;
        let v: Vec<f32> = (0..1000).map(|_| lcg(&mut s)).collect();
        let mut sorted = v.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        for k in [1, 2, 10, 999, 1000] {
            assert_eq!(kth_largest(v.iter().copied(), k), sorted[k - 1]);
        }
        assert_eq!(kth_largest([-1.0f32, -3.0, 2.0].into_iter(), 2), -1.0);
    }

    #[test]
    fn top_k_breaks_ties_by_position() {
        let s = [0.5, 0.9, 0.5, 0.9, 0.1];
        let mut k = top_k_positions(&s, 3);
        k.sort();
        assert_eq!(k, [0, 1, 3]);
        let long: Vec<f64> = (0..1000).map(|i| f64::from(i % 10)).collect();
        let mut k = top_k_positions(&long, 5);
        k.sort();
        assert_eq!(k, [9, 19, 29, 39, 49]);
        assert_eq!(
            admit_scores(&s, Some(0.5), Some(2)),
            [false, true, false, true, false]
        );
    }

    #[test]
    fn threaded_scan_equals_one_thread() {
        let (n, dim) = (5 * SEGMENT_ROWS + 17, 24);
        let mut e = Embeddings::default();
        let mut s = 11u64;
        let blocks: Vec<Block> = (0..n)
            .map(|i| {
                Block::build(
                    crate::block::NewBlock::new(format!("b{i}"), "x"),
                    crate::BlockId::random(),
                    Some(1),
                )
            })
            .collect();
        for b in &blocks {
            let v: Vec<f32> = (0..dim).map(|_| lcg(&mut s)).collect();
            e.attach(b, &v, false).unwrap();
        }
        let q: Vec<f32> = (0..dim).map(|_| lcg(&mut s)).collect();
        let view = e.view();
        let score = |threads: usize| {
            let mut out = vec![0f32; view.rows];
            view.for_segments_on(threads, &mut out, |seg, out| {
                scan(&seg.data[..out.len() * dim], dim, &q, out)
            });
            out
        };
        let one = score(1);
        assert_eq!(one, view.score_rows(&q));
        for threads in [2, 3, 8] {
            assert_eq!(score(threads), one, "{threads} threads");
        }
        for _ in 0..200 {
            // helpers that start after the caller finished must find nothing to do
            assert_eq!(score(4), one);
        }
        assert_eq!(scan_threads(PARALLEL_ROWS - 1), 1);
        assert!((1..=MAX_SCAN_THREADS).contains(&scan_threads(1_000_000)));
    }

    #[test]
    #[should_panic(expected = "a gate scan thread panicked")]
    fn a_panicking_segment_scan_is_reported_after_all_threads_stop() {
        let mut e = Embeddings::default();
        for i in 0..3 * SEGMENT_ROWS {
            let b = Block::build(
                crate::block::NewBlock::new(format!("b{i}"), "x"),
                crate::BlockId::random(),
                Some(1),
            );
            e.attach(&b, &[1.0, 0.0], false).unwrap();
        }
        let view = e.view();
        let mut out = vec![0f32; view.rows];
        let second = view.segments[1].data.as_ptr() as usize;
        view.for_segments_on(3, &mut out, |seg, _| {
            assert!(seg.data.as_ptr() as usize != second, "scan failed");
        });
    }

    /// Where a gated compile's time goes at 100 000 rows:
    /// `cargo test --release --lib timing -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn gate_timing() {
        let (n, dim) = (100_000, 384);
        let mut e = Embeddings::default();
        let mut s = 3u64;
        let blocks: Vec<Block> = (0..n)
            .map(|i| {
                Block::build(
                    crate::block::NewBlock::new(format!("b{i}"), "x"),
                    crate::BlockId::random(),
                    Some(1),
                )
            })
            .collect();
        for b in &blocks {
            let v: Vec<f32> = (0..dim).map(|_| lcg(&mut s)).collect();
            e.attach(b, &v, false).unwrap();
        }
        let rows = GateRows {
            rows: blocks.iter().map(|b| b.row().unwrap()).collect(),
            ungated: Vec::new(),
        };
        let q: Vec<f32> = (0..dim).map(|_| lcg(&mut s)).collect();
        let q = normalised(&q).into_owned();
        let view = e.view();
        for threads in [1, 2, 1, 2, 1, 2] {
            let mut out = vec![0f32; view.rows];
            let t = std::time::Instant::now();
            view.for_segments_on(threads, &mut out, |seg, out| {
                scan(&seg.data[..out.len() * dim], dim, &q, out)
            });
            eprintln!("float32 scan on {threads} thread(s): {:?}", t.elapsed());
        }
        for quantised in [false, true] {
            e.set_quantised(quantised);
            let view = e.view();
            for _ in 0..5 {
                let t = std::time::Instant::now();
                let sc = if quantised {
                    view.bounds_q8(&Quantised::new(&q)).len()
                } else {
                    view.score_rows(&q).len()
                };
                let t1 = t.elapsed();
                let t = std::time::Instant::now();
                let g = cosine_gate(&view, &rows, &q, None, Some(10), true);
                let t2 = t.elapsed();
                eprintln!(
                    "quantised={quantised} scan {t1:?} whole gate {t2:?} ({} {})",
                    sc,
                    g.scores.len()
                );
            }
        }
    }
}
