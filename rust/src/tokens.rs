//! Built-in token counter: exact OpenAI `cl100k_base`.
//!
//! `bpe-openai` compiles the merge table into the crate, so counting works offline
//! right after install (tiktoken downloads its table on first use, which this
//! project's users cannot rely on), and its linear-time BPE counts without
//! materialising token ids. Counts equal tiktoken's; see the tests.

/// Tokens of `text` under `cl100k_base`.
pub fn count_cl100k(text: &str) -> u32 {
    if text.is_empty() {
        return 0;
    }
    bpe_openai::cl100k_base().count(text) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_tiktoken_reference_counts() {
        // Reference values from tiktoken's cl100k_base.
        assert_eq!(count_cl100k(""), 0);
        assert_eq!(count_cl100k("hello world"), 2);
        assert_eq!(count_cl100k("tiktoken is great!"), 6);
    }
}
