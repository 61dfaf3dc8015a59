// The short training run the multi-rank trainer tests start from: 3 layers (two hidden
// layers, whose outputs are the halo rows exchanged), hidden 16, a few epochs under a fixed
// seed, no progress lines (the tests read the result, not stdout). Small enough for 4 ranks
// on 2 cores, deep enough that exchanges feed exchanges. Everything else keeps TrainOptions'
// defaults; each test sets what it is about on top. Several tests' bounds were measured on
// these values (test_residual_coding's loss error, test_task_training's metric tolerances), so
// a value changed here changes what all of them measure.
#pragma once

#include <cstdint>
#include <string>

#include "halogen/core/device.hpp"
#include "halogen/train/trainer.hpp"

namespace halogen::test {

inline TrainOptions small_options(Device device, const std::string& model, int epochs, uint64_t seed) {
  TrainOptions t;
  t.device.kind = device;
  t.model.name = model;
  t.model.layers = 3;
  t.model.hidden = 16;
  t.optim.epochs = epochs;
  t.seed = seed;
  t.output.progress = false;
  return t;
}

}  // namespace halogen::test
