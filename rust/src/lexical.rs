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
//! `rampart.relevance.lexical` (property tests compare the two). Every script
//! is text:
//! - a word is a run of letters, marks and digits of any script (Unicode
//!   general categories L*, M*, N*; `unicode_tables.rs`), lower-cased one
//!   character at a time; `camelCase` and `snake_case` split (ASCII);
//! - scripts written without spaces between words (Han, Hiragana, Katakana,
//!   Hangul, Thai, Lao, Khmer, Myanmar) give character bigrams of each run (a
//!   run of one character gives that character), as CJK bigram indexing does:
//!   no segmenter's dictionary to ship, and a question and a passage in the
//!   same language share bigrams wherever they share words;
//! - a fixed English stop list; plural and tense endings stemmed on ASCII words.

use std::collections::HashMap;

use crate::unicode_tables::WORD_RANGES;

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

/// Lengths of the prefixes a long hexadecimal word also gives as terms.
const HEX_PREFIXES: std::ops::RangeInclusive<usize> = 7..=12;

/// A word of 16 or more hexadecimal digits with at least one digit and one
/// letter: a commit, object or request id.
fn is_long_hex(w: &str) -> bool {
    w.len() >= 16
        && w.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && w.bytes().any(|b| b.is_ascii_digit())
        && w.bytes().any(|b| b.is_ascii_alphabetic())
}

/// Whether a non-ASCII character belongs to a script written without spaces
/// between words (its runs are indexed as character bigrams).
pub fn is_bigram_script(c: char) -> bool {
    matches!(c as u32,
        0x0E00..=0x0EFF        // Thai, Lao
        | 0x1000..=0x109F      // Myanmar
        | 0x1100..=0x11FF      // Hangul Jamo
        | 0x1780..=0x17FF      // Khmer
        | 0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3130..=0x318F      // Hangul compatibility Jamo
        | 0x31F0..=0x31FF      // Katakana phonetic extensions
        | 0x3400..=0x4DBF      // CJK extension A
        | 0x4E00..=0x9FFF      // CJK unified ideographs
        | 0xA960..=0xA97F      // Hangul Jamo extended A
        | 0xAC00..=0xD7FF      // Hangul syllables, Jamo extended B
        | 0xF900..=0xFAFF      // CJK compatibility ideographs
        | 0xFF66..=0xFF9F      // half-width Katakana
        | 0x20000..=0x3134F) // CJK extensions B..G
        && is_word_char(c)
}

/// Whether a non-ASCII character is a letter, mark or digit (general category
/// L*, M* or N*).
pub fn is_word_char(c: char) -> bool {
    let cp = c as u32;
    WORD_RANGES
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Calls `f` with each term of `text`, in order.
pub fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    let mut word = String::new();
    // the current run of a bigram script, and a buffer for one bigram
    let mut run: Vec<char> = Vec::new();
    let mut pair = String::new();
    let mut prev_lower_or_digit = false;
    let mut flush = |word: &mut String, run: &mut Vec<char>, f: &mut dyn FnMut(&str)| {
        if !word.is_empty() {
            if !is_stop(word) {
                f(if word.is_ascii() {
                    stem(word)
                } else {
                    word.as_str()
                });
                if is_long_hex(word) {
                    // a commit or object id: also the short forms people and
                    // tools write it in (git's 7 characters, up to 12)
                    for n in HEX_PREFIXES {
                        f(&word[..n]);
                    }
                }
            }
            word.clear();
        }
        if run.len() == 1 {
            pair.clear();
            pair.push(run[0]);
            f(&pair);
        } else {
            for w in run.windows(2) {
                pair.clear();
                pair.push(w[0]);
                pair.push(w[1]);
                f(&pair);
            }
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii() {
            // camelCase: a break before an upper-case ASCII letter that follows a
            // lower-case letter or digit (decided on the original text).
            if c.is_ascii_uppercase() && prev_lower_or_digit {
                flush(&mut word, &mut run, &mut f);
            }
            prev_lower_or_digit = c.is_ascii_lowercase() || c.is_ascii_digit();
            if c.is_ascii_alphanumeric() {
                if !run.is_empty() {
                    flush(&mut word, &mut run, &mut f);
                }
                word.push(c.to_ascii_lowercase());
            } else {
                flush(&mut word, &mut run, &mut f);
            }
            continue;
        }
        prev_lower_or_digit = false;
        if is_bigram_script(c) {
            if !word.is_empty() {
                flush(&mut word, &mut run, &mut f);
            }
            run.push(c);
        } else if is_word_char(c) {
            if !run.is_empty() {
                flush(&mut word, &mut run, &mut f);
            }
            // one character at a time (no context: the model does the same)
            word.extend(c.to_lowercase());
        } else {
            flush(&mut word, &mut run, &mut f);
        }
    }
    flush(&mut word, &mut run, &mut f);
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
            ["naïve", "café", "kelvin"]
        );
        assert_eq!(terms("使用Redis缓存"), ["使用", "redi", "缓存"]);
        assert_eq!(terms("超时时间"), ["超时", "时时", "时间"]);
        assert_eq!(
            terms("commit 8e50c42f76c0f7f65430cb81ed45ac664096d1d9"),
            [
                "commit",
                "8e50c42f76c0f7f65430cb81ed45ac664096d1d9",
                "8e50c42",
                "8e50c42f",
                "8e50c42f7",
                "8e50c42f76",
                "8e50c42f76c",
                "8e50c42f76c0"
            ]
        );
        assert_eq!(terms("猫 Ключ مفتاح"), ["猫", "ключ", "مفتاح"]);
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
