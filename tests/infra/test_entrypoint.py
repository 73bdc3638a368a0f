"""The container's scripts, outside Docker: docker/entrypoint.sh, docker/detect_gpu.sh,
docker/check_build.sh and docker/retry.sh.

Each test runs the scripts with bash under a PATH made of stubs (a fake nvidia-smi, or none) and
links to the few system tools the scripts use, so no real nvidia-smi on the machine leaks in.
python, the test suite and benchmarks/run_benchmarks.sh are stubs that record how they were called.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
DETECT = ROOT / "docker" / "detect_gpu.sh"
BASH = shutil.which("bash") or "/bin/bash"

# Everything the scripts run besides bash builtins. A new dependency must be added here,
# and so to the image (the test fails with "command not found" otherwise).
SYSTEM_TOOLS = ("bash", "dirname", "mkdir", "mktemp", "touch", "rm", "id", "date", "tee", "ls", "grep", "head", "cat", "sort", "uniq",
                "sleep")

H100 = "NVIDIA H100 80GB HBM3, 9.0, 570.124.06"
L4 = "NVIDIA L4, 8.9, 550.54.15"
A100 = "NVIDIA A100-SXM4-80GB, 8.0, 550.54.15"
A10G = "NVIDIA A10G, 8.6, 535.104.05"


def _write(path: pathlib.Path, text: str) -> pathlib.Path:
    path.write_text(textwrap.dedent(text).lstrip())
    path.chmod(0o755)
    return path


@pytest.fixture
def sandbox(tmp_path):
    """A PATH with links to SYSTEM_TOOLS only, a stub folder to put fakes in, a fake source tree
    (FLASHATTN_HOME) with a stub benchmarks/run_benchmarks.sh, a python stub, and a results folder."""
    sysbin = tmp_path / "sysbin"
    stubs = tmp_path / "stubs"
    home = tmp_path / "home"
    results = tmp_path / "results"
    log = tmp_path / "calls.log"
    for d in (sysbin, stubs, home / "benchmarks"):
        d.mkdir(parents=True)
    for tool in SYSTEM_TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed by the entrypoint tests"
        (sysbin / tool).symlink_to(found)
    sh = shutil.which("sh") or "/bin/sh"
    _write(
        stubs / "python3",
        f"""
        #!{sh}
        echo "python $*" >> "{log}"
        if [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then
          echo "3 passed in 0.01s"
          [ "$3 $4" = "-m multigpu" ] && exit "${{STUB_MULTIGPU_RC:-0}}"
          exit "${{STUB_PYTEST_RC:-0}}"
        fi
        exit 0
        """,
    )
    _write(
        home / "benchmarks" / "run_benchmarks.sh",
        f"""
        echo "run_benchmarks $*" >> "{log}"
        echo '{{"benchmarks": []}}' > "$1/bench.json"
        """,
    )
    _write(
        stubs / "show-args",
        f"""
        #!{sh}
        for a in "$@"; do printf '<%s>' "$a"; done
        echo
        exit "${{STUB_RC:-0}}"
        """,
    )

    class Box:
        pass

    box = Box()
    box.tmp, box.stubs, box.home, box.results, box.log = tmp_path, stubs, home, results, log
    box.env = {
        "PATH": f"{stubs}:{sysbin}",
        "HOME": str(tmp_path),
        "PYTHON": str(stubs / "python3"),
        "FLASHATTN_HOME": str(home),
        "RESULTS_DIR": str(results),
    }

    def fake_smi(output: str = "", rc: int = 0, no_compute_cap: bool = False):
        out = tmp_path / "nvidia-smi.out"
        out.write_text(output + "\n")
        _write(
            stubs / "nvidia-smi",
            f"""
            #!{sh}
            echo "nvidia-smi $*" >> "{log}"
            case "$*" in
              *compute_cap*)
                if [ "{int(no_compute_cap)}" = 1 ]; then
                  echo 'Field "compute_cap" is not a valid field to query.'; exit 2
                fi ;;
            esac
            cat "{out}"
            exit {rc}
            """,
        )

    def run(script=ENTRYPOINT, *args, **env):
        e = dict(box.env)
        e.update({k: str(v) for k, v in env.items()})
        return subprocess.run([BASH, str(script), *args], env=e, capture_output=True, text=True, timeout=60)

    def calls() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    box.fake_smi, box.run, box.calls = fake_smi, run, calls
    return box


def _detect(box) -> tuple[int, dict]:
    r = box.run(DETECT)
    kv = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    return r.returncode, kv


# ---- docker/detect_gpu.sh ----------------------------------------------------------------------


def test_detect_no_nvidia_smi(sandbox):
    rc, kv = _detect(sandbox)
    assert rc == 1
    assert kv["GPU_MARKER"] == "none"
    assert "nvidia-smi not found" in kv["GPU_REASON"] and "--gpus all" in kv["GPU_REASON"]


@pytest.mark.parametrize(
    "line,marker,cc,name",
    [
        (H100, "sm90", "9.0", "NVIDIA H100 80GB HBM3"),
        (L4, "sm89", "8.9", "NVIDIA L4"),
        (A100, "sm80", "8.0", "NVIDIA A100-SXM4-80GB"),
        (A10G, "sm86", "8.6", "NVIDIA A10G"),
        ("NVIDIA RTX PRO 6000 Blackwell, Workstation Edition, 12.0, 575.51", "sm120", "12.0",
         "NVIDIA RTX PRO 6000 Blackwell, Workstation Edition"),
    ],
)
def test_detect_gpu(sandbox, line, marker, cc, name):
    sandbox.fake_smi(line)
    rc, kv = _detect(sandbox)
    assert rc == 0
    assert (kv["GPU_MARKER"], kv["GPU_CC"], kv["GPU_NAME"], kv["GPU_COUNT"]) == (marker, cc, name, "1")
    assert kv["GPU_DRIVER"] and "GPU_REASON" not in kv


def test_detect_several_gpus_describes_the_first(sandbox):
    sandbox.fake_smi(f"{H100}\n{H100}\n{H100}\n{H100}")
    rc, kv = _detect(sandbox)
    assert rc == 0 and kv["GPU_MARKER"] == "sm90" and kv["GPU_COUNT"] == "4"


def test_detect_driver_failure(sandbox):
    sandbox.fake_smi(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.",
        rc=9,
    )
    rc, kv = _detect(sandbox)
    assert rc == 1 and kv["GPU_MARKER"] == "none"
    assert "couldn't communicate" in kv["GPU_REASON"]


def test_detect_no_devices(sandbox):
    sandbox.fake_smi("No devices were found", rc=6)
    rc, kv = _detect(sandbox)
    assert rc == 1 and kv["GPU_MARKER"] == "none" and "No devices were found" in kv["GPU_REASON"]


def test_detect_old_driver_without_compute_cap_maps_names(sandbox):
    sandbox.fake_smi("NVIDIA L4, 470.82.01", no_compute_cap=True)
    rc, kv = _detect(sandbox)
    assert rc == 0 and kv["GPU_MARKER"] == "sm89" and kv["GPU_NAME"] == "NVIDIA L4"


# ---- docker/entrypoint.sh: pass-through ------------------------------------------------------------


def test_args_are_executed_as_given(sandbox):
    sandbox.fake_smi(H100)
    r = sandbox.run(ENTRYPOINT, "show-args", "a b", "-m", "h100 and not slow", "")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "<a b><-m><h100 and not slow><>\n"
    # Pass-through runs no default job: no detection, no tests, nothing written.
    assert sandbox.calls() == []
    assert not sandbox.results.exists()


def test_pass_through_exit_status(sandbox):
    r = sandbox.run(ENTRYPOINT, "show-args", "x", STUB_RC=7)
    assert r.returncode == 7


def test_pass_through_execs(sandbox):
    # `exec`: the command replaces the shell (same PID), so it gets docker's signals directly.
    _write(sandbox.stubs / "pid-check", "#!/bin/sh\necho \"$$ $PPID\"\n")
    r = sandbox.run(ENTRYPOINT, "pid-check")
    pid, _ = r.stdout.split()
    wrapper = subprocess.run(
        [BASH, "-c", f'"{BASH}" "{ENTRYPOINT}" pid-check & echo "child $!"; wait'],
        env=sandbox.env, capture_output=True, text=True, timeout=60,
    )
    lines = wrapper.stdout.split("\n")
    child = next(line.split()[1] for line in lines if line.startswith("child"))
    inner = next(line.split()[0] for line in lines if line and not line.startswith("child"))
    assert inner == child, wrapper.stdout


def test_unwritable_home_is_replaced(sandbox):
    _write(sandbox.stubs / "show-home", '#!/bin/sh\necho "$HOME"\n')
    r = sandbox.run(ENTRYPOINT, "show-home", HOME="/nonexistent/home")
    assert r.returncode == 0, r.stderr
    home = r.stdout.strip()
    assert home.startswith("/tmp/home.") and os.access(home, os.W_OK)
    os.rmdir(home)
    r = sandbox.run(ENTRYPOINT, "show-home")
    assert r.stdout.strip() == str(sandbox.tmp)  # a writable HOME is kept


def test_leading_option_goes_to_pytest(sandbox):
    r = sandbox.run(ENTRYPOINT, "-m", "h100", "-x")
    assert r.returncode == 0, r.stderr
    assert sandbox.calls() == ["python -m pytest -m h100 -x"]


# ---- docker/entrypoint.sh: the default job ---------------------------------------------------------


def _pytest_calls(box) -> list[str]:
    return [c for c in box.calls() if c.startswith("python -m pytest")]


@pytest.mark.parametrize("line,marker", [(H100, "sm90"), (L4, "sm89"), (A100, "sm80")])
def test_default_job_on_a_known_gpu(sandbox, line, marker):
    sandbox.fake_smi(line)
    r = sandbox.run(ENTRYPOINT)
    assert r.returncode == 0, r.stderr
    (call,) = _pytest_calls(sandbox)
    assert call.startswith(f"python -m pytest -m (not gpu or {marker}) and not multigpu --junitxml "
                           f"{sandbox.results}/tests-junit.xml")
    assert "multi-GPU tests (pytest -m multigpu, context parallelism over NCCL) need 2 or more; not run" in r.stderr
    assert sandbox.calls()[-1] == f"run_benchmarks {sandbox.results}"
    assert (sandbox.results / "bench.json").exists()
    assert "3 passed" in (sandbox.results / "tests.log").read_text()
    env = (sandbox.results / "env.txt").read_text()
    assert f"gpu_marker: {marker}" in env and line.split(",")[0] in env


def test_default_job_on_an_unmarked_gpu_runs_the_whole_suite(sandbox):
    sandbox.fake_smi(A10G)
    r = sandbox.run(ENTRYPOINT)
    assert r.returncode == 0, r.stderr
    (call,) = _pytest_calls(sandbox)
    assert call.startswith("python -m pytest -m not multigpu --junitxml ") and " -m not gpu" not in call
    assert "no test marker for sm86" in r.stderr
    assert sandbox.calls()[-1].startswith("run_benchmarks")


def test_failed_tests_skip_the_benchmark(sandbox):
    sandbox.fake_smi(H100)
    r = sandbox.run(ENTRYPOINT, STUB_PYTEST_RC=1)
    assert r.returncode == 1
    assert "tests failed" in r.stderr
    assert not any(c.startswith("run_benchmarks") for c in sandbox.calls())


def test_extra_pytest_args_and_skips(sandbox):
    sandbox.fake_smi(H100)
    r = sandbox.run(ENTRYPOINT, FLASHATTN_PYTEST_ARGS="-x -q", FLASHATTN_SKIP_BENCH=1)
    assert r.returncode == 0, r.stderr
    (call,) = _pytest_calls(sandbox)
    assert call.endswith("-x -q")
    assert not any(c.startswith("run_benchmarks") for c in sandbox.calls())
    sandbox.log.unlink()
    r = sandbox.run(ENTRYPOINT, FLASHATTN_SKIP_TESTS=1)
    assert r.returncode == 0, r.stderr
    assert _pytest_calls(sandbox) == [] and sandbox.calls()[-1].startswith("run_benchmarks")


def test_several_gpus_run_the_multi_gpu_tests_on_their_own(sandbox):
    sandbox.fake_smi("\n".join([H100] * 4))
    r = sandbox.run(ENTRYPOINT, FLASHATTN_PYTEST_ARGS="-x")
    assert r.returncode == 0, r.stderr
    main, multi = _pytest_calls(sandbox)
    assert main.startswith("python -m pytest -m (not gpu or sm90) and not multigpu ")
    assert multi == f"python -m pytest -m multigpu --junitxml {sandbox.results}/tests-multigpu-junit.xml -x"
    assert "MULTI-GPU TESTS (4 GPUs)" in r.stderr
    assert "3 passed" in (sandbox.results / "tests-multigpu.log").read_text()
    assert sandbox.calls()[-1] == f"run_benchmarks {sandbox.results}"


def test_failed_multi_gpu_tests_skip_the_benchmark(sandbox):
    sandbox.fake_smi(f"{H100}\n{H100}")
    r = sandbox.run(ENTRYPOINT, STUB_MULTIGPU_RC=1)
    assert r.returncode == 1
    assert "multi-GPU tests failed (pytest exit status 1)" in r.stderr
    assert len(_pytest_calls(sandbox)) == 2
    assert not any(c.startswith("run_benchmarks") for c in sandbox.calls())


def test_failed_suite_runs_no_multi_gpu_tests(sandbox):
    sandbox.fake_smi(f"{H100}\n{H100}")
    r = sandbox.run(ENTRYPOINT, STUB_PYTEST_RC=2)
    assert r.returncode == 2
    assert len(_pytest_calls(sandbox)) == 1 and "MULTI-GPU" not in r.stderr


def test_warns_when_the_image_was_not_built_for_the_gpu(sandbox):
    sandbox.fake_smi(A100)
    r = sandbox.run(ENTRYPOINT, FLASHATTN_BUILT_ARCHS="8.9;9.0a")
    assert "not for compute capability 8.0" in r.stderr
    assert 'TORCH_CUDA_ARCH_LIST="8.0"' in r.stderr
    for built, line in (("8.9;9.0a", H100), ("8.9;9.0a", L4), ("8.0", A10G), ("8.0+PTX", H100)):
        sandbox.fake_smi(line)
        r = sandbox.run(ENTRYPOINT, FLASHATTN_BUILT_ARCHS=built)
        assert "WARNING" not in r.stderr, (built, line, r.stderr)


def test_no_gpu_says_so_and_runs_the_cpu_tests(sandbox):
    r = sandbox.run(ENTRYPOINT)  # no nvidia-smi on PATH
    assert r.returncode == 0, r.stderr
    assert "no NVIDIA GPU is visible" in r.stderr
    assert "--gpus all" in r.stderr and "NVIDIA Container Toolkit" in r.stderr
    (call,) = _pytest_calls(sandbox)
    assert call.startswith("python -m pytest -m not gpu ")
    assert not any(c.startswith("run_benchmarks") for c in sandbox.calls())
    assert "no_gpu_reason: nvidia-smi not found" in (sandbox.results / "env.txt").read_text()


def test_no_gpu_with_a_broken_driver(sandbox):
    sandbox.fake_smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", rc=9)
    r = sandbox.run(ENTRYPOINT)
    assert r.returncode == 0
    assert "couldn't communicate" in r.stderr
    assert _pytest_calls(sandbox)[0].startswith("python -m pytest -m not gpu ")


def test_no_gpu_is_an_error_when_required(sandbox):
    r = sandbox.run(ENTRYPOINT, FLASHATTN_REQUIRE_GPU=1)
    assert r.returncode == 3
    assert "no NVIDIA GPU is visible" in r.stderr
    assert _pytest_calls(sandbox) == []


def test_unwritable_results_folder_is_a_clear_error(sandbox):
    blocker = sandbox.tmp / "a-file"
    blocker.write_text("")
    r = sandbox.run(ENTRYPOINT, RESULTS_DIR=str(blocker / "results"))
    assert r.returncode == 2
    assert "cannot write to the results folder" in r.stderr and "--user" in r.stderr
    assert sandbox.calls() == []


def test_missing_benchmark_script_is_an_error(sandbox):
    (sandbox.home / "benchmarks" / "run_benchmarks.sh").unlink()
    sandbox.fake_smi(H100)
    r = sandbox.run(ENTRYPOINT)
    assert r.returncode == 4 and "run_benchmarks.sh is missing" in r.stderr


def test_env_txt_records_the_run(sandbox):
    sandbox.fake_smi(H100)
    r = sandbox.run(ENTRYPOINT, FLASHATTN_BUILT_ARCHS="8.9;9.0a", FLASHATTN_REVISION="abc1234")
    assert r.returncode == 0, r.stderr
    env = (sandbox.results / "env.txt").read_text()
    assert "image_built_archs: 8.9;9.0a" in env and "revision: abc1234" in env
    assert "python -" in sandbox.calls()  # the interpreter reports torch and the extension's build


def test_runs_outside_the_image_from_the_source_tree(sandbox):
    """`RESULTS_DIR=... bash docker/entrypoint.sh` on a GPU machine without Docker: the source tree
    is the script's parent folder, and env.txt says the kernels' archs are not the image's."""
    sandbox.fake_smi(H100)
    env = {k: v for k, v in sandbox.env.items() if k != "FLASHATTN_HOME"}
    _write(sandbox.stubs / "python3", f"#!/bin/sh\necho \"python $* in $PWD\" >> \"{sandbox.log}\"\n")
    r = subprocess.run([BASH, str(ENTRYPOINT)], env={**env, "FLASHATTN_SKIP_BENCH": "1"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (call,) = _pytest_calls(sandbox)
    assert call.startswith("python -m pytest -m (not gpu or sm90) and not multigpu ") and call.endswith(f" in {ROOT}")
    assert "image_built_archs: unknown (not run from the image)" in (sandbox.results / "env.txt").read_text()
    assert (sandbox.results / "tests.log").exists()


def test_scripts_are_executable():
    for script in (ENTRYPOINT, DETECT, ROOT / "docker" / "check_build.sh", ROOT / "docker" / "retry.sh",
                   ROOT / "docker" / "local_base.sh", ROOT / "docker" / "cuda_from_wheels.py"):
        assert os.access(script, os.X_OK), f"{script} must be executable (the image runs it directly)"


# ---- docker/check_build.sh (run at image build time) ---------------------------------------------


@pytest.mark.parametrize(
    "cubins,ok",
    [(["sm_89", "sm_90a"], True), (["sm_89"], False), (["sm_90a"], False), (["sm_89", "sm_90"], False)],
)
def test_check_build_wants_a_cubin_per_arch(sandbox, cubins, ok):
    listing = "".join(f"ELF file    {i + 1}: flashattn._C.{i + 1}.{c}.cubin\\n" for i, c in enumerate(cubins))
    _write(sandbox.stubs / "cuobjdump", f'#!/bin/sh\nprintf "{listing}"\n')
    _write(sandbox.stubs / "python3", "#!/bin/sh\necho /opt/flashattn/flashattn/_C.so\n")
    r = sandbox.run(ROOT / "docker" / "check_build.sh", "8.9;9.0a")
    assert (r.returncode == 0) == ok, r.stdout + r.stderr
    if not ok:
        assert "check_build: no sm_" in r.stderr


# ---- docker/retry.sh (network steps of the image build, .ci/run, docker/local_base.sh) ------------------

RETRY = ROOT / "docker" / "retry.sh"


def test_retry_tries_again_until_it_works(sandbox):
    counter = sandbox.tmp / "count"
    _write(sandbox.stubs / "flaky", f"""
        #!/bin/sh
        n=$(cat "{counter}" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "{counter}"
        [ "$n" -ge 3 ] || exit 7
        echo "worked on try $n"
        """)
    r = sandbox.run(RETRY, "flaky", RETRY_DELAY=0)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "worked on try 3"
    assert r.stderr.count("again in") == 2


def test_retry_gives_up_with_the_last_status(sandbox):
    r = sandbox.run(RETRY, "show-args", "x", RETRY_DELAY=0, RETRY_ATTEMPTS=3, STUB_RC=5)
    assert r.returncode == 5
    assert r.stdout.count("<x>") == 3 and "failed 3 times (last exit status 5)" in r.stderr


def test_retry_trusts_the_ca_secret_when_there(sandbox):
    _write(sandbox.stubs / "show-ca", '#!/bin/sh\necho "pip=$PIP_CERT ssl=$SSL_CERT_FILE apt=$(cat "$APT_CONFIG")"\n')
    ca = sandbox.tmp / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    r = sandbox.run(RETRY, "show-ca", RETRY_CA_BUNDLE=str(ca))
    assert r.returncode == 0, r.stderr
    assert f"pip={ca} ssl={ca} apt=Acquire::https::CAInfo \"{ca}\";" in r.stdout
    # No secret (a build without --secret, or the host): nothing is set.
    _write(sandbox.stubs / "show-ca", '#!/bin/sh\necho "pip=${PIP_CERT:-unset} apt=${APT_CONFIG:-unset}"\n')
    r = sandbox.run(RETRY, "show-ca", RETRY_CA_BUNDLE=str(sandbox.tmp / "absent"))
    assert r.stdout.strip() == "pip=unset apt=unset"


def test_retry_as_a_function_keeps_the_caller_going(sandbox):
    """Sourced (as .ci/run and local_base.sh do): retries shell functions, and under `set -e` a
    failure is the caller's to handle; the CA settings stay in the retried command."""
    script = sandbox.tmp / "caller.sh"
    script.write_text(f"""
set -e
. "{RETRY}"
tries=0
f() {{ echo try >> "{sandbox.tmp}/tries"; return 4; }}
RETRY_DELAY=0 RETRY_ATTEMPTS=2 retry f || echo "failed with $?"
echo "PIP_CERT=${{PIP_CERT:-unset}}"
""")
    ca = sandbox.tmp / "ca.crt"
    ca.write_text("x")
    r = sandbox.run(script, RETRY_CA_BUNDLE=str(ca))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["failed with 4", "PIP_CERT=unset"]
    assert (sandbox.tmp / "tries").read_text().count("try") == 2
