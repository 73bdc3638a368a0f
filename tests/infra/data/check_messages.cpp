// Raises every kind of message part csrc/check.h formats and prints what the error says, one line
// per check (tests/test_check_messages_cpu.py compares them). Torch-free apart from libc10.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "check.h"

template <class F>
void show(F&& f) {
  try {
    f();
    std::puts("no error");
  } catch (const c10::ValueError& e) {
    std::printf("ValueError|%s\n", e.what_without_backtrace());
  } catch (const c10::Error& e) {
    std::printf("Error|%s\n", e.what_without_backtrace());
  }
}

int main() {
  const int64_t sizes[] = {2, 128, 8, 64};
  show([] { FLASHATTN_CHECK(1 + 1 == 2, "never raised"); });
  show([] { FLASHATTN_CHECK(false, "op: causal_mode must be 0, 1 or 2, got ", int64_t{5}); });
  show([] { FLASHATTN_CHECK(false, "ints ", 7, " ", -3L, " ", 42u, " ", int64_t{1} << 40); });
  show([] { FLASHATTN_CHECK(false, "float ", 0.5, " ", 1.5f, " ", -2e-30); });
  show([&] { FLASHATTN_CHECK(false, "shape ", c10::IntArrayRef(sizes), " empty ", c10::IntArrayRef()); });
  show([] { FLASHATTN_CHECK(false, "dtype ", c10::ScalarType::BFloat16, " ", c10::ScalarType::Half); });
  show([] { FLASHATTN_CHECK(false, "device ", c10::Device(c10::DeviceType::CUDA, 1), " ", c10::Device("cpu")); });
  show([] { FLASHATTN_CHECK(false, "text ", std::string("str"), " ", std::string_view("view"), " ", 'c', " ", true); });
  show([] { FLASHATTN_CHECK_VALUE(false, "value ", 3); });
  return 0;
}
