#include "halogen/pipeline/progress_thread.hpp"

#include <vector>

namespace halogen {

void Completion::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Completion::ready() const {
  std::lock_guard lock(mutex_);
  return done_;
}

double Completion::transfer_seconds() const {
  std::lock_guard lock(mutex_);
  return done_ ? std::chrono::duration<double>(completed_ - posted_).count() : 0.0;
}

void Completion::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    completed_ = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
}

ProgressThread::ProgressThread(std::chrono::microseconds poll_interval)
    : poll_interval_(poll_interval), thread_([this] { run(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Completion> ProgressThread::submit(std::function<std::unique_ptr<CommRequest>()> start) {
  auto completion = std::make_shared<Completion>();
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Job{std::move(start), completion, nullptr});
  }
  cv_.notify_all();
  return completion;
}

void ProgressThread::run() {
  std::vector<Job> active;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (active.empty()) cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty() && active.empty()) return;
      while (!queue_.empty()) {
        active.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    // Post what is new (in submission order), then test everything in flight.
    for (auto& job : active) {
      if (job.start) {
        auto start = std::move(job.start);
        job.start = nullptr;
        {
          std::lock_guard lock(job.completion->mutex_);
          job.completion->posted_ = std::chrono::steady_clock::now();
        }
        try {
          job.request = start();
          if (!job.request) job.completion->finish(nullptr);
        } catch (...) {
          job.completion->finish(std::current_exception());
        }
      }
    }
    for (auto& job : active) {
      if (!job.request) continue;
      try {
        if (job.request->test()) {
          job.request.reset();
          job.completion->finish(nullptr);
        }
      } catch (...) {
        job.request.reset();
        job.completion->finish(std::current_exception());
      }
    }
    std::erase_if(active, [](const Job& j) { return !j.request && !j.start; });
    if (!active.empty()) std::this_thread::sleep_for(poll_interval_);
  }
}

Transfer Transfer::post(Communicator& comm, ProgressThread* progress, std::vector<PeerBuffer> sends,
                        std::vector<PeerBuffer> recvs, int tag) {
  Transfer t;
  if (sends.empty() && recvs.empty()) return t;
  if (progress != nullptr) {
    Communicator* c = &comm;
    t.completion_ = progress->submit(
        [c, sends = std::move(sends), recvs = std::move(recvs), tag] { return c->start_exchange(sends, recvs, tag); });
  } else {
    t.request_ = comm.start_exchange(sends, recvs, tag);
  }
  return t;
}

Transfer::~Transfer() {
  if (!in_flight()) return;
  try {
    wait();
  } catch (...) {
  }
}

bool Transfer::ready() const {
  if (completion_) return completion_->ready();
  return request_ ? request_->test() : true;
}

double Transfer::wait() {
  double seconds = 0.0;
  if (completion_) {
    const auto completion = std::move(completion_);  // not in flight any more, even on error
    completion->wait();
    seconds = completion->transfer_seconds();
  } else if (request_) {
    const auto request = std::move(request_);
    request->wait();
  }
  return seconds;
}

}  // namespace halogen
