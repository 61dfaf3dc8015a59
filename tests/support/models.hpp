// Trainer-level suites over every registered model (model_names(), the registry's) on both
// devices: a model added to the registry is covered by them without new test code.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "devices.hpp"
#include "halogen/train/trainer.hpp"

namespace halogen::test {

using DeviceAndModel = std::tuple<Device, std::string>;

inline std::string device_and_model_name(const testing::TestParamInfo<DeviceAndModel>& info) {
  return to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
}

}  // namespace halogen::test

/// Instantiates a TEST_P suite over DeviceAndModel: both devices times every registered model.
#define HALOGEN_INSTANTIATE_DEVICES_AND_MODELS(suite)                                                               \
  INSTANTIATE_TEST_SUITE_P(Models, suite,                                                                           \
                           ::testing::Combine(::testing::Values(::halogen::Device::kCpu, ::halogen::Device::kCuda), \
                                              ::testing::ValuesIn(::halogen::model_names())),                       \
                           ::halogen::test::device_and_model_name)
