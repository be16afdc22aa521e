// Errors: every failure in flashkit is a flashkit::Error carrying a Status and a message that
// names the argument at fault and what was expected.
#pragma once
#include <stdexcept>
#include <string>

namespace flashkit {

enum class Status : int32_t {
  ok = 0,
  invalid_argument = 1,  // shapes, dtypes, strides, options, pointers
  unsupported = 2,       // valid request this build or device cannot serve (e.g. CUDA absent)
  out_of_memory = 3,     // an allocation refused up front or failed
  device_error = 4,      // a CUDA call failed
  internal = 5,
};

const char* status_name(Status s);

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

[[noreturn]] void fail(Status status, const std::string& message);

}  // namespace flashkit
