//! Per-block memory overhead of the registry, measured with a counting allocator.
//!
//! Target (issue): <= 200 bytes per block beyond the content bytes. "Content
//! bytes" here are the name and content text; everything else (the block
//! struct, the Arc headers, the id index, the order vector and its spare
//! capacity) counts as overhead.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use rampart::registry::Position;
use rampart::{NewBlock, Registry};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarding the caller's layout to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as GlobalAlloc::realloc, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn new_block(i: usize, tagged: bool) -> NewBlock {
    let mut nb = NewBlock::new(
        format!("block_{i}"),
        format!("Instruction number {i}: keep the diff minimal and run the tests."),
    );
    nb.token_count = Some(15);
    if tagged {
        nb.tags = vec!["rules".into(), "git".into()];
    }
    nb
}

fn overhead_per_block(n: usize, tagged: bool) -> f64 {
    let payload: usize = (0..n)
        .map(|i| {
            let nb = new_block(i, tagged);
            nb.name.len() + nb.content.len() + nb.tags.iter().map(|t| t.len()).sum::<usize>()
        })
        .sum();
    let registry = Registry::new("memory");
    let before = LIVE.load(Ordering::Relaxed);
    // One at a time, as agents write, so the growth slack of the index and the
    // order vector is included. Each NewBlock is freed as it is consumed, so
    // `after - before` is exactly what the registry holds.
    for i in 0..n {
        registry
            .insert(new_block(i, tagged), registry.id(), Position::Back)
            .unwrap();
    }
    let held = (LIVE.load(Ordering::Relaxed) - before) as f64;
    drop(registry);
    (held - payload as f64) / n as f64
}

#[test]
fn per_block_overhead_is_within_budget() {
    let n = 100_000;
    let plain = overhead_per_block(n, false);
    let tagged = overhead_per_block(n, true);
    println!("per-block overhead at N={n}: {plain:.1} B (no tags), {tagged:.1} B (tagged)");
    assert!(
        plain <= 200.0,
        "plain blocks: {plain:.1} bytes of overhead per block"
    );
    assert!(
        tagged <= 200.0,
        "tagged blocks: {tagged:.1} bytes of overhead per block"
    );
}
