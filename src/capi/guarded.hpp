// The C ABI's one exception boundary, shared by its translation units (flashkit_c.cpp, engine_c.cpp, cs149_c.cpp):
// runs f and turns every exception into a status code plus the calling thread's last-error message.
#pragma once
#include <exception>
#include <new>
#include <string>

#include "flashkit/error.hpp"
#include "flashkit/flashkit.h"

namespace flashkit::capi_detail {

void set_last_error(const std::string& msg);  // the one thread-local message (flashkit_c.cpp)

template <typename F>
fk_status guarded(F&& f) {
  try {
    f();
    set_last_error("");
    return FK_OK;
  } catch (const flashkit::Error& e) {
    set_last_error(e.what());
    return static_cast<fk_status>(e.status());
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return FK_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return FK_INTERNAL;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return FK_INTERNAL;
  }
}

}  // namespace flashkit::capi_detail
