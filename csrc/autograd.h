// The switch the ops' autograd (csrc/autograd.cpp) reads when a forward runs: flashattn's own
// deterministic mode, set from Python (flashattn.set_deterministic through csrc/module.cpp). Kept
// here so that no call pays a Python read of it.
#pragma once

namespace flashattn {

void set_deterministic(bool flag);
bool get_deterministic();

}  // namespace flashattn
