#!/usr/bin/env python3
"""Every file or document a comment names exists in the repository.

Scans the comments of the C++, CUDA, CMake, shell and Python sources (lines or trailing parts
starting with //, # or inside /* */) for names that look like files (`dir/name.ext` or
`name.ext` with a source or document extension) and checks that a file of the repository ends
with that path. Names of files that a program writes or reads at run time are told apart by
where they appear: only comments are read, and a name can be marked as not a repository file
by writing it inside backquotes with a leading `$` or `<`, or by listing it in ALLOWED below.
Exit 1 with one line per missing name: FILE:LINE: NAME.

usage: scripts/check_comment_paths.py [ROOT]
"""
import os, re, subprocess, sys

EXTENSIONS = ("hpp", "cpp", "cu", "cuh", "h", "md", "sh", "py", "cmake", "yaml", "in")
NAME = re.compile(r"(?<![\w./$<-])((?:[\w.-]+/)*[\w-]+\.(?:%s))(?![\w/])" % "|".join(EXTENSIONS))
SOURCE = {".hpp": "//", ".cpp": "//", ".cu": "//", ".cuh": "//", ".h": "//", ".sh": "#", ".py": "#",
          ".cmake": "#", ".txt": "#"}
# Names that comments use for files outside the repository (system headers, outputs, the
# design notes kept beside it).
ALLOWED = {"cblas.h", "mpi.h", "nccl.h", "omp.h", "metis.h", "ptscotch.h", "scotch.h", "cuda.h", "zlib.h", "cuda_fp16.h",
           "cublas_api.h", "cublas_v2.h",
           "model.json", "latest.json", "meta.json", "report.json", "predict.json", "summary.json",
           "results.csv", "plot.gp", "sweep.csv", "cmd.sh", "job.sh", "train.sbatch.in"}


def comments(path, marker):
    in_block = False
    for number, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
        text = ""
        if marker == "//":
            if in_block:
                end = line.find("*/")
                text, in_block = (line, True) if end < 0 else (line[:end], False)
            elif "/*" in line and "*/" not in line[line.find("/*"):]:
                text, in_block = line[line.find("/*"):], True
            elif "//" in line:
                text = line[line.find("//"):]
        elif marker == "#":
            stripped = line.lstrip()
            if stripped.startswith("#") and not stripped.startswith("#!") and not stripped.startswith("#include"):
                text = stripped
            elif " # " in line:
                text = line[line.find(" # "):]
        if text:
            yield number, text


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    files = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split()
    missing = []
    for rel in files:
        ext = os.path.splitext(rel)[1] if not rel.endswith("CMakeLists.txt") else ".txt"
        if ext not in SOURCE or rel.startswith("tests/fuzz/corpus/") or not os.path.exists(os.path.join(root, rel)):
            continue
        for number, text in comments(os.path.join(root, rel), SOURCE[ext]):
            for name in NAME.findall(text):
                if name in ALLOWED or "*" in name or name.startswith("."):
                    continue
                if not any(f == name or f.endswith("/" + name) for f in files):
                    missing.append(f"{rel}:{number}: {name}")
    for m in missing:
        print(m)
    print(f"{len(missing)} comment(s) name a file that is not in the repository" if missing
          else "every file a comment names exists")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
