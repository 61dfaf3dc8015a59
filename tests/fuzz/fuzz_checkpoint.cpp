// Fuzz entry function of the checkpoint file reader (CheckpointReader): the input is the
// rank file; an accepted file's "meta" record is then read the way --resume reads it.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "fuzz_targets.hpp"
#include "halogen/core/error.hpp"
#include "halogen/train/checkpoint.hpp"

namespace halogen::fuzz {

int fuzz_checkpoint(const uint8_t* data, size_t size) {
  const auto path = scratch_dir() / "rank-0.ckpt";
  write_bytes(path, as_text(data, size));
  const CheckpointReader reader(path);
  if (!reader.has("meta")) return 0;
  const std::string& meta = reader.bytes("meta");
  std::vector<char> copy(meta.size());
  reader.read_into("meta", copy.data(), copy.size());
  HALOGEN_FUZZ_CHECK(std::string(copy.begin(), copy.end()) == meta, "read_into copies the record");
  try {
    (void)reader.json("meta");
  } catch (const nlohmann::json::exception&) {
    // CheckpointReader::json lets nlohmann's parse error through (not a halogen::Error, and
    // its message does not name the file); reported, tolerated here so fuzzing goes on.
  }
  return 0;
}

}  // namespace halogen::fuzz
