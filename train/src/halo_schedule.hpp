// The schedule of one layer's halo exchange in a training epoch. The trainer (trainer.cpp)
// supplies the exchange itself (start / finish callables on its exchanger's Exchange type),
// the same on every device:
//   sync     start, finish, then all of the layer's work;
//   overlap  start, the work that needs no halo row, finish, the rest;
//   stale    (an epoch the adapter did not make synchronous) finish the exchanges of epochs
//            <= t - S (waiting if need be), start this epoch's and leave it in flight, then
//            all the work with the halo held: deterministic whatever the network's timing.
// A synchronous epoch in stale mode first drains what is in flight: forward halos are applied,
// backward gradients dropped, so every epoch applies exactly one set of halo gradients.
#pragma once

#include <deque>
#include <functional>
#include <utility>

#include "halogen/pipeline/staleness.hpp"

namespace halogen::train_detail {

template <typename Pending>
using InFlight = std::deque<std::pair<int, Pending>>;  // oldest first, with the epoch each carries

/// What the schedule needs to know of the epoch.
struct EpochSchedule {
  ExchangeMode mode = ExchangeMode::kSync;
  bool sync_epoch = true;  // the adapter's decision for this epoch
  float smoothing = 0.0f;  // stale smoothing g (0: off)
  bool stale_epoch() const { return mode == ExchangeMode::kStale && !sync_epoch; }
};

/// Forward: start() posts this epoch's exchange and returns its Pending; finish(p, keep)
/// writes its halo rows (keep: the smoothing factor, 0 outside stale epochs). `has_halo`:
/// this rank receives halo rows (otherwise nothing it uses is stale).
template <typename Pending, typename Start, typename Finish>
void schedule_forward(const EpochSchedule& e, InFlight<Pending>& in_flight, StalenessTracker& tracker, int layer,
                      int epoch, bool has_halo, Start&& start, Finish&& finish,
                      const std::function<void()>& before_halo, const std::function<void()>& after_halo) {
  if (e.stale_epoch()) {
    while (!in_flight.empty() && in_flight.front().first <= epoch - tracker.bound()) {
      finish(in_flight.front().second, e.smoothing);
      tracker.set_forward(layer, in_flight.front().first);
      in_flight.pop_front();
    }
    if (has_halo) tracker.use_forward(layer, epoch);
    in_flight.emplace_back(epoch, start());
    before_halo();
    after_halo();
    return;
  }
  for (auto& [sent, p] : in_flight) finish(p, 0.0f);
  in_flight.clear();
  Pending pending = start();
  if (e.mode == ExchangeMode::kSync) {
    finish(pending, 0.0f);
    before_halo();
  } else {
    before_halo();
    finish(pending, 0.0f);
  }
  after_halo();
  tracker.set_forward(layer, epoch);
  tracker.use_forward(layer, epoch);
}

/// Backward: start() posts this epoch's halo gradients; finish(p, keep) adds received ones
/// into the owned rows (keep as above); discard(p) completes one without applying it.
/// `has_sends`: this rank's rows are halo rows elsewhere (gradients come back to it).
template <typename Pending, typename Start, typename Finish, typename Discard>
void schedule_backward(const EpochSchedule& e, InFlight<Pending>& in_flight, StalenessTracker& tracker, int layer,
                       int epoch, bool has_sends, Start&& start, Finish&& finish, Discard&& discard,
                       const std::function<void()>& owned_rows) {
  if (e.stale_epoch()) {
    Pending fresh = start();
    owned_rows();
    while (!in_flight.empty() && in_flight.front().first <= epoch - tracker.bound()) {
      if (has_sends) tracker.use_backward(layer, in_flight.front().first, epoch);
      finish(in_flight.front().second, e.smoothing);
      in_flight.pop_front();
    }
    in_flight.emplace_back(epoch, std::move(fresh));
    return;
  }
  for (auto& [sent, p] : in_flight) discard(p);
  in_flight.clear();
  Pending pending = start();
  owned_rows();
  finish(pending, 0.0f);
}

}  // namespace halogen::train_detail
