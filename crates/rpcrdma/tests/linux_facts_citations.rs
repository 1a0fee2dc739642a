//! The repository is self-contained: the Linux and wire facts its code and docs rely on
//! are cited from `docs/linux-facts.md` (with their provenance), never from a file
//! outside the repository, and every section cited by title exists.

use std::fs;
use std::path::{Path, PathBuf};

const FACTS: &str = "docs/linux-facts.md";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Text files of the repository: sources, manifests, docs, scripts; build output,
/// caches and fuzzing artefacts left out.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let skip = matches!(
                name.as_str(),
                "target" | ".git" | "cache" | "out" | "corpus" | "artifacts"
            );
            if !skip {
                text_files(&path, out);
            }
        } else if e.metadata().is_ok_and(|m| m.len() < 1 << 20) {
            out.push(path);
        }
    }
}

/// Section titles of `docs/linux-facts.md` (`##` and `###` headings).
fn sections(doc: &str) -> Vec<&str> {
    doc.lines()
        .filter_map(|l| l.strip_prefix("### ").or_else(|| l.strip_prefix("## ")))
        .map(str::trim)
        .collect()
}

#[test]
fn facts_are_cited_from_the_repository_and_every_cited_section_exists() {
    let root = repo_root();
    let doc = fs::read_to_string(root.join(FACTS)).expect("docs/linux-facts.md");
    let titles = sections(&doc);
    let mut files = Vec::new();
    text_files(&root, &mut files);
    assert!(files.len() > 50, "walked {} files", files.len());
    let mut problems = Vec::new();
    let mut citations = 0;
    for path in files {
        let Ok(text) = fs::read_to_string(&path) else {
            continue; // not UTF-8: no citation in it
        };
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let this_test = rel.ends_with("linux_facts_citations.rs");
        for (n, line) in text.lines().enumerate() {
            // The one mention of the outside file is the provenance note.
            if line.contains("FACTS.md") && rel != FACTS && !this_test {
                problems.push(format!("{rel}:{}: cites FACTS.md: {line}", n + 1));
            }
        }
        // `docs/linux-facts.md, "Section"`, possibly wrapped onto the next line of a
        // comment: join the lines, dropping comment markers.
        let joined: String = text
            .lines()
            .map(|l| {
                l.trim()
                    .trim_start_matches("//!")
                    .trim_start_matches("///")
                    .trim_start_matches("//")
                    .trim()
            })
            .collect::<Vec<_>>()
            .join(" ");
        let needle = format!("{FACTS}, \"");
        let mut rest = joined.as_str();
        while let Some(i) = rest.find(&needle) {
            rest = &rest[i + needle.len()..];
            let Some(end) = rest.find('"') else { break };
            let title = &rest[..end];
            citations += 1;
            if !this_test && !titles.contains(&title) {
                problems.push(format!("{rel}: no section \"{title}\" in {FACTS}"));
            }
            rest = &rest[end..];
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(citations >= 5, "only {citations} section citations found");
}
