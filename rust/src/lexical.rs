//! The lexical relevance signal: the term rule and an incremental Okapi BM25
//! index over passages.
//!
//! One scorer for everything that ranks text by shared rare words: the tool
//! gate's BM25 (tool names, file names, API names), the tool-example gate, and
//! the conversation's retention policy (which tool result does the current step
//! need). The index is incremental because a conversation only grows: each new
//! tool result adds its passages once, and a query costs one walk over the
//! postings of its terms, however long the history.
//!
//! The term rule is the contract shared with the pure-Python model in
//! `rampart.relevance.lexical` (property tests compare the two): `camelCase` and
//! `snake_case` split, lower-cased, ASCII letter/digit runs, a fixed stop list,
//! plural and tense endings stemmed.

use std::collections::HashMap;

/// Words that say nothing about which text is meant (requests are full of them).
const STOP: &[&str] = &[
    "a", "an", "the", "to", "of", "in", "on", "for", "and", "or", "with", "is", "are", "be",
    "this", "that", "it", "its", "my", "me", "i", "we", "you", "your", "our", "from", "by", "as",
    "at", "into", "all", "any", "what", "which", "who", "how", "do", "does", "can", "please", "so",
    "just", "not", "than", "then", "there", "their", "them", "those", "these", "was", "were",
    "will", "would", "should", "could", "have", "has", "had", "get", "give", "show", "make", "let",
];

fn is_stop(w: &str) -> bool {
    STOP.contains(&w)
}

/// Plural and tense endings only: enough for "files"/"file", "branches"/"branch",
/// "staged"/"stag" (both sides of a match are stemmed alike).
fn stem(w: &str) -> &str {
    let n = w.len(); // ASCII only: bytes are chars
    if n > 4
        && ["ches", "shes", "sses", "xes", "zes"]
            .iter()
            .any(|s| w.ends_with(s))
    {
        return &w[..n - 2];
    }
    for suffix in ["ing", "ed", "s"] {
        if n > suffix.len() + 2 && w.ends_with(suffix) && !w.ends_with("ss") {
            return &w[..n - suffix.len()];
        }
    }
    w
}

/// Calls `f` with each term of `text`, in order.
pub fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    let mut word = String::new();
    let mut prev_lower_or_digit = false;
    let mut flush = |word: &mut String| {
        if !word.is_empty() {
            if !is_stop(word) {
                f(stem(word));
            }
            word.clear();
        }
    };
    for c in text.chars() {
        // camelCase: a break before an upper-case ASCII letter that follows a
        // lower-case letter or digit (decided on the original text).
        if c.is_ascii_uppercase() && prev_lower_or_digit {
            flush(&mut word);
        }
        prev_lower_or_digit = c.is_ascii_lowercase() || c.is_ascii_digit();
        if c.is_ascii() {
            let l = c.to_ascii_lowercase();
            if l.is_ascii_alphanumeric() {
                word.push(l);
            } else {
                flush(&mut word);
            }
        } else {
            // Unicode lower-casing may yield ASCII letters (KELVIN SIGN -> 'k').
            for l in c.to_lowercase() {
                if l.is_ascii_alphanumeric() {
                    word.push(l);
                } else {
                    flush(&mut word);
                }
            }
        }
    }
    flush(&mut word);
}

/// The terms of `text` (see the module's rule).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_owned()));
    out
}

/// Okapi BM25 over documents added one at a time (k1, b as usual). Document
/// frequencies, lengths and the average length are those of every document
/// added so far, so a score is the same whether the index was built at once or
/// grew.
#[derive(Debug, Clone)]
pub struct Bm25Index {
    k1: f64,
    b: f64,
    lengths: Vec<u32>,
    total_len: u64,
    /// term -> (document, term frequency), documents ascending
    postings: HashMap<String, Vec<(u32, u32)>>,
}

impl Bm25Index {
    pub fn new(k1: f64, b: f64) -> Self {
        Self {
            k1,
            b,
            lengths: Vec::new(),
            total_len: 0,
            postings: HashMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Add one document; returns its index.
    pub fn add(&mut self, text: &str) -> u32 {
        let doc = u32::try_from(self.lengths.len()).expect("more than 2^32 documents");
        let mut tf: HashMap<String, u32> = HashMap::new();
        let mut n = 0u32;
        for_each_term(text, |t| {
            n += 1;
            match tf.get_mut(t) {
                Some(c) => *c += 1,
                None => {
                    tf.insert(t.to_owned(), 1);
                }
            }
        });
        for (t, c) in tf {
            self.postings.entry(t).or_default().push((doc, c));
        }
        self.lengths.push(n);
        self.total_len += u64::from(n);
        doc
    }

    /// The score of every document for `query`, in document order. A term that
    /// occurs twice in the query counts twice (as in the Python model).
    pub fn scores(&self, query: &str) -> Vec<f64> {
        let n = self.lengths.len();
        let mut out = vec![0.0; n];
        if n == 0 {
            return out;
        }
        let avg = self.total_len as f64 / n as f64;
        let (k1, b) = (self.k1, self.b);
        for_each_term(query, |t| {
            let Some(post) = self.postings.get(t) else {
                return;
            };
            let df = post.len() as f64;
            let idf = (1.0 + (n as f64 - df + 0.5) / (df + 0.5)).ln();
            for &(d, f) in post {
                let len = f64::from(self.lengths[d as usize]);
                let norm = if avg > 0.0 {
                    k1 * (1.0 - b + b * len / avg)
                } else {
                    k1
                };
                let f = f64::from(f);
                out[d as usize] += idf * f * (k1 + 1.0) / (f + norm);
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_rule() {
        assert_eq!(
            terms("readFile read_file"),
            ["read", "file", "read", "file"]
        );
        assert_eq!(terms("The branches were staged"), ["branch", "stag"]);
        assert_eq!(terms("HTTPServer v2Beta"), ["httpserver", "v2", "beta"]);
        assert_eq!(
            terms("naïve café \u{212A}elvin"),
            ["na", "ve", "caf", "kelvin"]
        );
        assert!(terms("").is_empty());
    }

    #[test]
    fn bm25_prefers_the_document_with_the_rare_term() {
        let mut ix = Bm25Index::new(1.2, 0.75);
        ix.add("the cache keeps the prefix");
        ix.add("postgres replica failover timeout");
        ix.add("the window and the budget");
        let s = ix.scores("failover timeout");
        assert!(s[1] > 0.0 && s[0] == 0.0 && s[2] == 0.0);
        assert_eq!(Bm25Index::new(1.2, 0.75).scores("x"), Vec::<f64>::new());
    }

    #[test]
    fn growing_equals_building_at_once() {
        let docs = [
            "alpha beta",
            "beta gamma gamma",
            "delta",
            "alpha alpha delta",
        ];
        let mut a = Bm25Index::new(1.2, 0.75);
        for d in docs {
            a.add(d);
        }
        let mut b = Bm25Index::new(1.2, 0.75);
        for d in &docs[..2] {
            b.add(d);
        }
        let _ = b.scores("alpha");
        for d in &docs[2..] {
            b.add(d);
        }
        assert_eq!(a.scores("alpha gamma"), b.scores("alpha gamma"));
    }
}
