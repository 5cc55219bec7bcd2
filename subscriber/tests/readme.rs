//! The README's embedding example is `examples/readme.rs` (which cargo builds and clippy lints): they must not
//! drift apart.

#[test]
fn the_readme_embedding_example_is_the_compiled_one() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../README.md")).unwrap();
    let start = readme.find("```rust\n").expect("the README has a rust block") + "```rust\n".len();
    let len = readme[start..].find("```\n").expect("closed");
    let block = &readme[start..start + len];
    let example = std::fs::read_to_string(root.join("examples/readme.rs")).unwrap();
    let code: String = example.lines().skip_while(|l| l.starts_with("//")).map(|l| format!("{l}\n")).collect();
    assert_eq!(code, block, "README.md's rust block and subscriber/examples/readme.rs differ");
}
