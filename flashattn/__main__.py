"""`python -m flashattn`: what this install holds. pip hides the build's output on success, so the
README's install command ends with this line: it says whether the CUDA kernels were built (and for
which targets) or why not, and which GPU torch sees. Exit status 0 either way: a CPU machine
without kernels is a valid install (the reference and the validation work there)."""

from __future__ import annotations

import torch

import flashattn


def main() -> int:
    cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
    print(f"flashattn {flashattn.__version__}: torch {torch.__version__} ({cuda})")
    if flashattn.extension_available():
        info = flashattn.build_info()
        print("flashattn: CUDA kernels built: " + ", ".join(f"{k} {v}" for k, v in sorted(info.items())))
    else:
        print(f"flashattn: CUDA kernels NOT built: {flashattn.extension_error()}")
    if torch.cuda.is_available():
        names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
        print(f"flashattn: GPU: {', '.join(names)}")
    else:
        print("flashattn: no CUDA GPU visible to torch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
