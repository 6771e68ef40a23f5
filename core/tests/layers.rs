//! The rooms of the code (docs/architecture.md, "Layers"): no two files of a crate import each
//! other in a circle, and in `proxy-core` the two halves meet only in `base` and at the seam.
//!
//! Reads the sources (not the compiled crate): every `crate::a::b` path on a line that is not a
//! comment, outside a file's inline `mod tests`, is an edge from the file's module to the
//! longest module prefix of the path. Test files (`tests.rs`, `testutil.rs`) are
//! left out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`progress::comm`) → source text, for every product file under `src`.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let rel = rel.to_string_lossy().replace('/', "::");
            let name = rel.rsplit("::").next().unwrap().to_owned();
            if p.extension().is_none_or(|x| x != "rs") || name == "tests" || name == "testutil" {
                continue;
            }
            let module = rel.strip_suffix("::mod").unwrap_or(&rel).to_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            let product = text.split("\nmod tests {").next().unwrap().to_owned();
            out.insert(module, product);
        }
    }
    out
}

/// The module → module edges of `mods` (see the file docs).
fn edges(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, text) in mods {
        let set = out.entry(m.clone()).or_default();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for piece in line.split("crate::").skip(1) {
                let path: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let parts: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
                for k in (1..=parts.len()).rev() {
                    let cand = parts[..k].join("::");
                    if mods.contains_key(&cand) {
                        let nested = m.starts_with(&format!("{cand}::"))
                            || cand.starts_with(&format!("{m}::"));
                        if cand != *m && !nested {
                            set.insert(cand);
                        }
                        break;
                    }
                }
            }
        }
    }
    out
}

/// The strongly connected components of more than one module (the import circles).
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Two modules are in one circle when each reaches the other.
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(v) = todo.pop() {
            for w in g.get(&v).into_iter().flatten() {
                if seen.insert(w.clone()) {
                    todo.push(w.clone());
                }
            }
        }
        seen
    };
    let all: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|m| (m, reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for (m, r) in &all {
        if done.contains(*m) || !r.contains(*m) {
            continue;
        }
        let comp: Vec<String> = r.iter().filter(|o| all[o].contains(*m)).cloned().collect();
        done.extend(comp.iter().cloned());
        out.push(comp);
    }
    out
}

fn src_of(crate_dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(crate_dir)
        .join("src")
}

#[test]
#[cfg_attr(miri, ignore = "reads the source tree (Miri isolates the file system)")]
fn no_file_imports_in_a_circle() {
    let crates = [
        ".",
        "abi",
        "collectives",
        "../platform-linux/runtime",
        "../platform-linux/bootstrap",
        "../platform-linux/libfabric",
        "../platform-linux/emulator",
        "../platform-linux/perf",
        "../ffi",
        "../ffi/driver",
    ];
    let mut found = Vec::new();
    for c in crates {
        let mods = modules(&src_of(c));
        assert!(!mods.is_empty(), "{c}: no modules read");
        for comp in circles(&edges(&mods)) {
            found.push(format!("{c}: {comp:?}"));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
#[cfg_attr(miri, ignore = "reads the source tree (Miri isolates the file system)")]
fn the_halves_meet_only_in_base_and_at_the_seam() {
    let mods = modules(&src_of("."));
    let g = edges(&mods);
    let mut bad = Vec::new();
    for (m, to) in &g {
        for t in to {
            let crosses = (m.starts_with("base") && !t.starts_with("base"))
                || (m.starts_with("driver") && t.starts_with("progress"))
                || (m.starts_with("progress") && t.starts_with("driver"));
            if crosses {
                bad.push(format!("{m} -> {t}"));
            }
        }
    }
    assert!(bad.is_empty(), "imports past a layer: {bad:?}");
    // The check reads what it should: the driver half does use base and the seam.
    assert!(g["driver::task::network"].contains("base::abort"));
    assert!(g["driver::task::network"].contains("seam"));
}

#[test]
fn a_planted_circle_is_found() {
    let mut mods = BTreeMap::new();
    mods.insert("a".to_owned(), "use crate::b::X;".to_owned());
    mods.insert(
        "b".to_owned(),
        "use crate::c::Y;\n// crate::a in a comment".to_owned(),
    );
    mods.insert("c".to_owned(), "fn f() { crate::a::g() }".to_owned());
    mods.insert("d".to_owned(), "use crate::a;".to_owned());
    assert_eq!(
        circles(&edges(&mods)),
        vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]
    );
}
