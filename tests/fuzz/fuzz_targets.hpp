// The fuzz entry functions of halogen's input readers.
//
// Each `fuzz_<name>` feeds one arbitrary byte string to one reader. It returns 0 when the
// reader accepted the input (and the result passed the checks below), and lets the
// halogen::Error of a rejected input propagate. Anything else is a bug: another exception
// type, a sanitizer report, or a failed HALOGEN_FUZZ_CHECK (which aborts). The same
// functions run under libFuzzer (tests/fuzz/libfuzzer_main.cpp, built with HALOGEN_FUZZ)
// and in the regression test that replays the committed inputs
// (tests/fuzz/test_fuzz_regressions.cpp), so a crash found once stays fixed.
//
// Input layouts (tests/fuzz/README.md has the details and how to add a target):
//  - edge_list, matrix_market, metis_graph: the input is the file (plain or gzip).
//  - text_input: byte 0 picks the block size (16 + b % 64); the rest is the file. Lines are
//    compared with a straightforward split of the plain bytes.
//  - ogb_dataset: up to 8 sections (split_sections) = num-node-list, num-edge-list, edge,
//    node-feat, node-label, split train, valid, test. A missing section = a missing file.
//  - dataset: byte 0 = DatasetFuzzFlags, then meta.json, offsets, indices, features, labels,
//    split as sections (whole .bin files, or payloads the harness puts a header on).
//  - shard: the serialised shard, parsed as it is and again after re-sealing its checksums.
//  - checkpoint: one rank's checkpoint file (CheckpointReader).
//  - npz: the .npz archive (read twice, with two block sizes, which must agree).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace halogen::fuzz {

int fuzz_edge_list(const uint8_t* data, size_t size);
int fuzz_matrix_market(const uint8_t* data, size_t size);
int fuzz_metis_graph(const uint8_t* data, size_t size);
int fuzz_text_input(const uint8_t* data, size_t size);
int fuzz_ogb_dataset(const uint8_t* data, size_t size);
int fuzz_dataset(const uint8_t* data, size_t size);
int fuzz_shard(const uint8_t* data, size_t size);
int fuzz_checkpoint(const uint8_t* data, size_t size);
int fuzz_npz(const uint8_t* data, size_t size);

using FuzzFunction = int (*)(const uint8_t*, size_t);

struct FuzzTarget {
  std::string_view name;  // folder name under tests/fuzz/corpus and tests/fuzz/regressions
  FuzzFunction function;
};

inline constexpr FuzzTarget kFuzzTargets[] = {
    {"edge_list", fuzz_edge_list},   {"matrix_market", fuzz_matrix_market}, {"metis_graph", fuzz_metis_graph},
    {"text_input", fuzz_text_input}, {"ogb_dataset", fuzz_ogb_dataset},     {"dataset", fuzz_dataset},
    {"shard", fuzz_shard},           {"checkpoint", fuzz_checkpoint},       {"npz", fuzz_npz},
};

}  // namespace halogen::fuzz
