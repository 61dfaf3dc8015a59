// The registered tasks, by name: a new task is its file and one line here.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>

#include "halogen/core/error.hpp"
#include "tasks/task.hpp"

namespace halogen::tasks {

std::unique_ptr<Task> make_multiclass();
std::unique_ptr<Task> make_multilabel();
std::unique_ptr<Task> make_regression();

namespace {
struct Entry {
  std::string_view name;
  std::unique_ptr<Task> (*make)();
  LabelKind labels;
};
constexpr Entry kTasks[] = {
    {"multiclass", &make_multiclass, LabelKind::kClass},       // tasks/multiclass.cpp
    {"multilabel", &make_multilabel, LabelKind::kMultiLabel},  // tasks/multilabel.cpp
    {"regression", &make_regression, LabelKind::kRegression},  // tasks/regression.cpp
};

const Entry& entry(std::string_view name) {
  for (const Entry& e : kTasks)
    if (e.name == name) return e;
  HALOGEN_FAIL("unknown task '{}': expected one of {}", name, fmt::join(task_names(), ", "));
}
}  // namespace

std::unique_ptr<Task> make_task(std::string_view name) { return entry(name).make(); }

LabelKind trains_on(std::string_view task) { return entry(task).labels; }

std::unique_ptr<Task> make_task(std::string_view name, LabelKind kind) {
  if (name.empty()) return make_task(default_task(kind));
  const Entry& e = entry(name);
  HALOGEN_EXPECTS(e.labels == kind,
                  "--task {} trains on {} labels, and this dataset's labels are {} (its task is {}; "
                  "convert the labels, or leave --task out)",
                  name, to_string(e.labels), to_string(kind), default_task(kind));
  return e.make();
}

Selection selection_by(const Task& task, std::string_view metric) {
  if (metric.empty()) return task.selection();
  const std::vector<std::string_view> names = task.metric_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == metric) return {i, metric != "mse"};
  HALOGEN_FAIL("--selection-metric {}: the task {} reports {}", metric, task.name(), fmt::join(names, ", "));
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const Entry& e : kTasks) names.emplace_back(e.name);
  return names;
}

}  // namespace halogen::tasks
