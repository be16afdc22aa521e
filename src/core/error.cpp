#include "flashkit/error.hpp"

namespace flashkit {

const char* status_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::invalid_argument: return "invalid argument";
    case Status::unsupported: return "unsupported";
    case Status::out_of_memory: return "out of memory";
    case Status::device_error: return "device error";
    case Status::internal: return "internal error";
  }
  return "unknown status";
}

void fail(Status status, const std::string& message) { throw Error(status, message); }

}  // namespace flashkit
