#include "chat/diagnostics.hpp"

#include "chat/budget.hpp"
#include "flashkit/error.hpp"

namespace flashkit::chat::jinja {

void error_at(Pos p, const std::string& msg) {
  fail(Status::invalid_argument,
       "chat template: " + msg + " (line " + std::to_string(p.line) + ", column " + std::to_string(p.col) + ")");
}

void nesting_error(Pos p, int limit) { error_at(p, "nesting deeper than " + std::to_string(limit)); }

void Budget::steps_exceeded(Pos p) const {
  error_at(p, "render budget exceeded: more than " + std::to_string(limits_.max_steps) +
                  " steps (RenderLimits::max_steps)");
}
void Budget::string_too_long(size_t bytes, Pos p) const {
  error_at(p, "output limit exceeded: a string of " + std::to_string(bytes) + " bytes is more than " +
                  std::to_string(limits_.max_output_bytes) + " (RenderLimits::max_output_bytes)");
}
void Budget::list_too_long(size_t items, Pos p) const {
  error_at(p, "list limit exceeded: " + std::to_string(items) + " items is more than " +
                  std::to_string(limits_.max_list_items) + " (RenderLimits::max_list_items)");
}

}  // namespace flashkit::chat::jinja
