//! Compile stages 1–4 over one immutable view of the registry's order.
//!
//! A compile takes an `Arc` of the order (one refcount bump under the read lock)
//! and then works without any lock, so compiles never wait for each other and
//! writers wait only for that bump. The budget walk stops at the first block that
//! does not fit, so its cost follows what is *included*, not the registry size;
//! the exclusion report is derived lazily from the same view (`exclusions`), which
//! is why a `Selection` keeps the view alive.

use std::sync::Arc;

use crate::block::Block;
use crate::embeddings::admit_scores;
use crate::error::{CoreError, Result};

pub type Order = Arc<Vec<Arc<Block>>>;

/// Stage-1 relevance gate: one score per block of the view, plus the cut.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    pub scores: Vec<f64>,
    /// Admit blocks whose score is >= threshold.
    pub threshold: Option<f64>,
    /// Admit at most this many blocks, highest scores first, ties in registry order.
    pub top_k: Option<usize>,
}

/// Why a block was left out of a compile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Exclusion {
    /// The relevance gate rejected it (its score).
    Gate(f64),
    /// The budget walk stopped at this block: its cost (with separator) did not
    /// fit in what remained.
    OverBudget { cost: u64, remaining: u64 },
    /// The walk had already stopped at an earlier block (order decides; no skipping ahead).
    AfterStop { stopped_at: usize },
}

#[derive(Debug)]
pub struct Selection {
    pub order: Order,
    /// Indices into `order` of the emitted blocks, in compile order.
    pub included: Vec<u32>,
    /// Admitted tool blocks kept out of the prompt (`tools_in_prompt == false`):
    /// they go only to the tools list, in registry order.
    pub tools_only: Vec<u32>,
    /// Index into `order` of the first admitted block that did not fit.
    pub stop: Option<usize>,
    /// Admission by the gate, per index of `order` (`None`: no gate ran).
    pub admitted: Option<Vec<bool>>,
    pub scores: Option<Vec<f64>>,
    pub total_tokens: u64,
    pub sep_tokens: u32,
    pub budget: Option<u64>,
    /// The stable prefix (docs/specification.md §8): the first `stable.blocks` included blocks,
    /// `stable.tokens` tokens, end before the first block whose presence depends
    /// on the task. Found during the walk, so it costs a compile nothing extra.
    pub stable: StablePrefix,
}

/// Where the task-independent front of a compiled prompt ends.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StablePrefix {
    /// Included blocks before the boundary.
    pub blocks: u32,
    /// Their tokens, separators between them included (none after the last).
    pub tokens: u64,
    /// Position in the order of the first gated block the walk met with a gate
    /// (emitted or skipped): the boundary. `None`: the whole prompt is stable.
    pub first_dependent: Option<usize>,
}

impl StablePrefix {
    /// A prompt with no task-dependent block: all of it is stable.
    pub fn whole(blocks: usize, tokens: u64) -> Self {
        StablePrefix {
            blocks: blocks as u32,
            tokens,
            first_dependent: None,
        }
    }
}

fn admit(order_len: usize, gate: &Gate) -> Result<Vec<bool>> {
    if gate.scores.len() != order_len {
        return Err(CoreError::InvalidArgument(format!(
            "gate returned {} scores for {} blocks",
            gate.scores.len(),
            order_len
        )));
    }
    if let Some(i) = gate.scores.iter().position(|s| s.is_nan()) {
        return Err(CoreError::InvalidArgument(format!(
            "gate score for block #{i} is NaN"
        )));
    }
    Ok(admit_scores(&gate.scores, gate.threshold, gate.top_k))
}

/// `admit` for a callable gate, keeping ungated blocks (docs/specification.md §8): they are
/// admitted whatever their score and take no place among the `top_k`.
fn admit_gated(order: &[Arc<Block>], gate: &Gate) -> Result<Vec<bool>> {
    if order.iter().all(|b| b.gated) {
        return admit(order.len(), gate);
    }
    let pool = Gate {
        scores: order
            .iter()
            .zip(&gate.scores)
            .map(|(b, &s)| if b.gated { s } else { f64::NEG_INFINITY })
            .collect(),
        threshold: gate.threshold,
        top_k: gate.top_k,
    };
    // Scores checked (count, NaN) on the caller's own values first.
    admit(order.len(), gate)?;
    let mut admitted = admit(order.len(), &pool)?;
    for (a, b) in admitted.iter_mut().zip(order.iter()) {
        *a |= !b.gated;
    }
    Ok(admitted)
}

/// Stage 1 of a compile: where the gate's decision comes from.
#[derive(Clone, Debug, Default)]
pub enum GateInput {
    /// No gate: every block is admitted.
    #[default]
    None,
    /// Scores from the caller's gate callable, cut here by threshold / top-k.
    Scores(Gate),
    /// Admission already decided (the built-in cosine gate scans and cuts in one
    /// pass over the embedding matrix): per position, admitted and score.
    Decided {
        admitted: Vec<bool>,
        scores: Vec<f64>,
    },
}

/// Everything one compile decides, besides the order it walks.
#[derive(Clone, Debug, Default)]
pub struct CompileRequest {
    pub budget: Option<u64>,
    /// Tokens of the separator placed between emitted blocks.
    pub sep_tokens: u32,
    pub gate: GateInput,
    /// `false`: admitted tool blocks go only to the tools list (not the prompt
    /// nor its budget).
    pub tools_in_prompt: bool,
    /// Stages 1–3 only: no access is counted.
    pub dry_run: bool,
}

/// The one compile pipeline: gate, ordered walk, budget cut, and (unless a dry
/// run) access counting, over one immutable view of the order. Every compile of
/// the binding — ungated, callable gate, cosine gate, tools in or out of the
/// prompt, dry or not — goes through here; rendering the prompt is the caller's.
pub fn compile(order: Order, req: CompileRequest) -> Result<Selection> {
    let admission = match req.gate {
        GateInput::None => None,
        GateInput::Scores(g) => Some((admit_gated(&order, &g)?, g.scores)),
        GateInput::Decided { admitted, scores } => Some((admitted, scores)),
    };
    let sel = select_with(
        order,
        req.budget,
        req.sep_tokens,
        admission,
        req.tools_in_prompt,
    );
    if !req.dry_run {
        sel.record_access();
    }
    Ok(sel)
}

/// Stages 1–3 with scores from a gate callable, tools in the prompt: a dry
/// `compile` (kept for the core's own tests and callers).
pub fn select(
    order: Order,
    budget: Option<u64>,
    sep_tokens: u32,
    gate: Option<Gate>,
) -> Result<Selection> {
    compile(
        order,
        CompileRequest {
            budget,
            sep_tokens,
            gate: gate.map_or(GateInput::None, GateInput::Scores),
            tools_in_prompt: true,
            dry_run: true,
        },
    )
}

/// Stages 2–3 after a gate decided `admission` (per position: admitted, score).
/// With `tools_in_prompt == false`, admitted tool blocks skip the budget walk
/// and go to `tools_only` (the API's tools list), not the prompt.
fn select_with(
    order: Order,
    budget: Option<u64>,
    sep_tokens: u32,
    admission: Option<(Vec<bool>, Vec<f64>)>,
    tools_in_prompt: bool,
) -> Selection {
    let (admitted, scores) = match admission {
        Some((a, s)) => (Some(a), Some(s)),
        None => (None, None),
    };
    let mut included = Vec::new();
    let mut tools_only = Vec::new();
    let mut total: u64 = 0;
    let mut stop = None;
    let mut stable: Option<StablePrefix> = None;
    let gate_ran = admitted.is_some();
    for (i, block) in order.iter().enumerate() {
        // The first gated block the prompt could hold ends the stable prefix,
        // whether the gate admits it or not (its presence depends on the task).
        if gate_ran && stable.is_none() && block.gated && (tools_in_prompt || !block.tool) {
            stable = Some(StablePrefix {
                blocks: included.len() as u32,
                tokens: total,
                first_dependent: Some(i),
            });
        }
        if let Some(a) = &admitted {
            if !a[i] {
                continue;
            }
        }
        if block.tool && !tools_in_prompt {
            tools_only.push(i as u32);
            continue;
        }
        let sep = if included.is_empty() {
            0
        } else {
            u64::from(sep_tokens)
        };
        let cost = block.cost() + sep;
        if let Some(b) = budget {
            if total + cost > b {
                stop = Some(i);
                // Tools stay out of the budget, so later admitted tools still go
                // to the tools list.
                if !tools_in_prompt {
                    tools_only.extend(
                        order[i + 1..]
                            .iter()
                            .enumerate()
                            .map(|(k, b)| (i + 1 + k, b))
                            .filter(|(j, b)| b.tool && admitted.as_ref().is_none_or(|a| a[*j]))
                            .map(|(j, _)| j as u32),
                    );
                }
                break;
            }
        }
        total += cost;
        included.push(i as u32);
    }
    let stable = stable.unwrap_or_else(|| StablePrefix::whole(included.len(), total));
    Selection {
        order,
        included,
        tools_only,
        stop,
        admitted,
        scores,
        total_tokens: total,
        sep_tokens,
        budget,
        stable,
    }
}

impl Selection {
    pub fn included_blocks(&self) -> impl Iterator<Item = &Arc<Block>> + '_ {
        self.included.iter().map(move |&i| &self.order[i as usize])
    }

    /// Stage 4: count an emission for every included block (and every tool
    /// sent in the tools list).
    pub fn record_access(&self) {
        for b in self.included_blocks() {
            b.record_access();
        }
        for &i in &self.tools_only {
            self.order[i as usize].record_access();
        }
    }

    /// The prompt, built in one allocation: lengths are summed first.
    pub fn render(&self, separator: &str) -> String {
        let n = self.included.len();
        if n == 0 {
            return String::new();
        }
        let bytes: usize = self
            .included_blocks()
            .map(|b| b.rendered_len())
            .sum::<usize>()
            + separator.len() * (n - 1);
        let mut out = String::with_capacity(bytes);
        for (k, b) in self.included_blocks().enumerate() {
            if k > 0 {
                out.push_str(separator);
            }
            b.render_into(&mut out);
        }
        debug_assert_eq!(out.len(), bytes);
        out
    }

    /// Cost each included block added (its separator included), compile order.
    pub fn included_costs(&self) -> Vec<u64> {
        self.included_blocks()
            .enumerate()
            .map(|(k, b)| {
                b.cost()
                    + if k == 0 {
                        0
                    } else {
                        u64::from(self.sep_tokens)
                    }
            })
            .collect()
    }

    /// Every excluded block of the view, in registry order, with its reason.
    pub fn exclusions(&self) -> Vec<(usize, Exclusion)> {
        let mut out =
            Vec::with_capacity(self.order.len() - self.included.len() - self.tools_only.len());
        let mut inc = self.included.iter().peekable();
        let mut tools = self.tools_only.iter().peekable();
        let spent = self.total_tokens;
        for i in 0..self.order.len() {
            if inc.peek().is_some_and(|&&j| j as usize == i) {
                inc.next();
                continue;
            }
            if tools.peek().is_some_and(|&&j| j as usize == i) {
                tools.next();
                continue;
            }
            if let (Some(a), Some(s)) = (&self.admitted, &self.scores) {
                if !a[i] {
                    out.push((i, Exclusion::Gate(s[i])));
                    continue;
                }
            }
            match self.stop {
                Some(stop) if i == stop => {
                    let sep = if self.included.is_empty() {
                        0
                    } else {
                        u64::from(self.sep_tokens)
                    };
                    let remaining = self.budget.unwrap_or(u64::MAX).saturating_sub(spent);
                    out.push((
                        i,
                        Exclusion::OverBudget {
                            cost: self.order[i].cost() + sep,
                            remaining,
                        },
                    ));
                }
                Some(stop) => out.push((i, Exclusion::AfterStop { stopped_at: stop })),
                // Unreachable: without a stop every admitted block is included.
                None => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{BlockId, NewBlock};

    fn order(costs: &[u32]) -> Order {
        let author = BlockId::random();
        Arc::new(
            costs
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    Arc::new(Block::build(
                        NewBlock::new(format!("b{i}"), format!("c{i}")),
                        author,
                        Some(c),
                    ))
                })
                .collect(),
        )
    }

    #[test]
    fn exact_fit_includes_everything() {
        // 10 + (1+10) + (1+10) = 32
        let s = select(order(&[10, 10, 10]), Some(32), 1, None).unwrap();
        assert_eq!(s.included, vec![0, 1, 2]);
        assert_eq!(s.total_tokens, 32);
        assert!(s.exclusions().is_empty());
        let s = select(order(&[10, 10, 10]), Some(31), 1, None).unwrap();
        assert_eq!(
            s.included,
            vec![0, 1],
            "one token short drops the last block"
        );
    }

    #[test]
    fn stops_at_first_block_that_does_not_fit() {
        // b1 does not fit; b2 would, but order decides.
        let s = select(order(&[10, 50, 1]), Some(20), 1, None).unwrap();
        assert_eq!(s.included, vec![0]);
        assert_eq!(s.stop, Some(1));
        let ex = s.exclusions();
        assert_eq!(
            ex[0],
            (
                1,
                Exclusion::OverBudget {
                    cost: 51,
                    remaining: 10
                }
            )
        );
        assert_eq!(ex[1], (2, Exclusion::AfterStop { stopped_at: 1 }));
    }

    #[test]
    fn first_block_too_big_gives_empty_prompt() {
        let s = select(order(&[100]), Some(99), 1, None).unwrap();
        assert!(s.included.is_empty());
        assert_eq!(s.render("--"), "");
        assert_eq!(s.total_tokens, 0);
    }

    #[test]
    fn render_joins_with_separator() {
        let s = select(order(&[1, 1, 1]), None, 1, None).unwrap();
        assert_eq!(s.render("|"), "c0|c1|c2");
        assert_eq!(s.included_costs(), vec![1, 2, 2]);
    }

    #[test]
    fn gate_threshold_and_top_k() {
        let g = Gate {
            scores: vec![0.9, 0.1, 0.5, 0.5, 0.7],
            threshold: Some(0.4),
            top_k: Some(2),
        };
        let s = select(order(&[1; 5]), None, 0, Some(g)).unwrap();
        assert_eq!(s.included, vec![0, 4]);
        let g = Gate {
            scores: vec![0.5, 0.5, 0.5],
            threshold: None,
            top_k: Some(2),
        };
        let s = select(order(&[1; 3]), None, 0, Some(g)).unwrap();
        assert_eq!(s.included, vec![0, 1], "ties keep registry order");
        let g = Gate {
            scores: vec![0.5],
            threshold: None,
            top_k: Some(0),
        };
        assert!(select(order(&[1]), None, 0, Some(g))
            .unwrap()
            .included
            .is_empty());
    }

    #[test]
    fn gate_rejects_bad_scores() {
        let g = Gate {
            scores: vec![0.5],
            threshold: Some(0.1),
            top_k: None,
        };
        assert!(select(order(&[1, 1]), None, 0, Some(g)).is_err());
        let g = Gate {
            scores: vec![f64::NAN],
            threshold: Some(0.1),
            top_k: None,
        };
        assert!(select(order(&[1]), None, 0, Some(g)).is_err());
    }

    #[test]
    fn access_counts_only_for_included() {
        let s = select(order(&[5, 5]), Some(5), 0, None).unwrap();
        s.record_access();
        assert_eq!(s.order[0].access_count(), 1);
        assert_eq!(s.order[1].access_count(), 0);
    }
}
