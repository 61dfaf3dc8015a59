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
};
constexpr Entry kTasks[] = {
    {"multiclass", &make_multiclass},  // tasks/multiclass.cpp
    {"multilabel", &make_multilabel},  // tasks/multilabel.cpp
    {"regression", &make_regression},  // tasks/regression.cpp
};
}  // namespace

std::unique_ptr<Task> make_task(std::string_view name) {
  for (const Entry& e : kTasks)
    if (e.name == name) return e.make();
  HALOGEN_FAIL("unknown task '{}': expected one of {}", name, fmt::join(task_names(), ", "));
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const Entry& e : kTasks) names.emplace_back(e.name);
  return names;
}

}  // namespace halogen::tasks
