#!/usr/bin/env python3
"""Every relative link and every repository path that the README and docs/ name exists.

Reads README.md, python/README.md and docs/*.md and checks:
- every Markdown link or image whose target is not a URL or an anchor: `[text](target)`,
  relative to the document's directory (an `#anchor` after the path is ignored);
- every path in backquotes that starts with one of the repository's top-level directories
  (`bench/`, `docs/`, `scripts/`, `train/`, ...): its first word, without a `:line` suffix,
  must be a file or directory of the repository. Paths under `build/` are outputs of the
  build and are not checked, nor is anything outside the repository.
Exit 1 with one line per missing target: DOCUMENT:LINE: TARGET.

usage: scripts/check_doc_links.py [ROOT]
"""
import glob, os, re, sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`([^`]+)`")
TOP_DIRS = ("bench/", "docs/", "scripts/", "train/", "core/", "comm/", "pipeline/", "quant/", "partition/",
            "launch/", "python/", "tests/", "cluster_configs/", "cmake/", ".ci/")


def documents(root):
    docs = [os.path.join(root, "README.md"), os.path.join(root, "python", "README.md")]
    docs += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    return [d for d in docs if os.path.exists(d)]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    missing = []
    for doc in documents(root):
        rel_doc = os.path.relpath(doc, root)
        in_fence = False
        for number, line in enumerate(open(doc, encoding="utf-8"), 1):
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            if in_fence:
                continue  # commands in examples name the user's files, not the repository's
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                path = os.path.normpath(os.path.join(os.path.dirname(doc), target.split("#", 1)[0]))
                if not os.path.exists(path):
                    missing.append(f"{rel_doc}:{number}: {target}")
            for code in CODE.findall(line):
                word = code.split()[0] if code.split() else ""
                if not word.startswith(TOP_DIRS):
                    continue
                word = re.sub(r":\d+$", "", word).rstrip(",.;")
                if "*" in word or "<" in word or "{" in word:
                    continue
                if not os.path.exists(os.path.join(root, word)):
                    missing.append(f"{rel_doc}:{number}: {word}")
    for m in missing:
        print(m)
    print(f"{len(missing)} link(s) or path(s) in the documentation do not exist" if missing
          else "every link and path in the documentation exists")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
