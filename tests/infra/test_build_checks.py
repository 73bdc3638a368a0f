"""Build checks that need no GPU: every kernel compiles for every target with no spills, within
its launch bounds and each architecture's shared memory, and the generated files are current.

These run in CI on a CPU machine with nvcc. They are what keeps the earlier attempt's failures
(template instantiation, link errors, 160 KB of shared memory on a 99 KB L4) from coming back.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from repo_modules import load_repo_module

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
NVCC = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/bin/nvcc"
HAVE_NVCC = pathlib.Path(NVCC).exists()
# .ci/run sets this: on CI a missing nvcc is a failure, never a skip.
REQUIRE_NVCC = os.environ.get("FLASHATTN_REQUIRE_NVCC") == "1"
# CUDA 12.8's ptxas (from the nvidia-cuda-nvcc-cu12 wheel, requirements-ci.txt): where set (.ci/run
# sets it), the same PTX is assembled by it too for sm_89 and sm_90a, its ISA lowered to 8.7
# (tools/check_cuda128.sh says why that is safe); tools/ci_static.sh then leaves that check here.
PTXAS_128 = os.environ.get("FLASHATTN_PTXAS_128", "")

L4_SMEM_PER_BLOCK = 99 * 1024
H100_SMEM_PER_BLOCK = 227 * 1024


checker = load_repo_module("tools/check_resources.py")

needs_nvcc = pytest.mark.skipif(
    not HAVE_NVCC and not REQUIRE_NVCC, reason=f"nvcc not found at {NVCC} (set NVCC=/path/to/nvcc)"
)


def _tell(config: pytest.Config, line: str) -> None:
    """A line on the terminal now, whatever the capture mode: the check below runs for minutes
    (about 7 on 2 cores) inside one test, which would otherwise sit on a single `.`."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    capman = config.pluginmanager.get_plugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        reporter.write_line(f"build checks: {line}")


@pytest.fixture(scope="module")
def resource_report(tmp_path_factory, pytestconfig) -> dict:
    """One run of tools/check_resources.py over every kernel x {sm_80, sm_89, sm_90a}, its progress
    reported about every 10% of the compiles."""
    if not HAVE_NVCC:
        pytest.fail(f"nvcc not found at {NVCC}, and FLASHATTN_REQUIRE_NVCC=1")
    out = tmp_path_factory.mktemp("resources") / "report.json"
    cmd = [sys.executable, str(TOOLS / "check_resources.py"), "--nvcc", NVCC, "--json", str(out), "--progress"]
    if PTXAS_128:
        cmd += ["--also-ptxas", PTXAS_128, "--also-ptx-isa", "8.7", "--also-archs", "sm_89,sm_90a"]
    log: list[str] = []
    next_report = 0.1
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        assert p.stdout is not None
        for line in p.stdout:
            m = re.match(r"progress: (\d+)/(\d+) (\d+) ", line)
            if m is None:
                log.append(line)
                continue
            done, total, secs = map(int, m.groups())
            if done == 1:
                also = f", sm_89/sm_90a also by {PTXAS_128}" if PTXAS_128 else ""
                _tell(pytestconfig, f"{total} compiles (kernel files x targets) to PTX, assembled with ptxas -v{also}, "
                      f"{os.cpu_count()} at a time (tools/check_resources.py)")
            if done / total >= next_report or done == total:
                eta = f", about {secs * (total - done) / done / 60:.0f} min left" if done < total else ""
                _tell(pytestconfig, f"{done}/{total} compiled in {secs} s{eta}")
                next_report = done / total + 0.1
    report = json.loads(out.read_text()) if out.exists() else {}
    report["returncode"] = p.returncode
    report["log"] = "".join(log)
    return report


def test_generated_instantiations_are_current() -> None:
    r = subprocess.run([sys.executable, str(TOOLS / "gen_instantiations.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, f"csrc/*/instantiations/ is stale; run tools/gen_instantiations.py\n{r.stdout}{r.stderr}"


# An explicit instantiation: `template` followed by a declaration, not by a parameter list.
_EXPLICIT_INSTANTIATION = re.compile(r"^[ \t]*(?:extern[ \t]+)?template[ \t]+(?!<)\S", re.MULTILINE)


def test_every_instantiation_is_generated() -> None:
    """Kernels are instantiated only in the generator's files, so each dispatcher's table
    (registry.inc) and the compiled set cannot drift apart by a hand edit elsewhere."""
    gen = load_repo_module("tools/gen_instantiations.py")
    generated = {ROOT / "csrc" / kp.folder / "instantiations" / name
                 for kp in gen.kernel_paths() for name in kp.render()}
    found = [p for p in sorted((ROOT / "csrc").rglob("*")) if p.suffix in {".cu", ".cuh", ".h", ".cpp"}
             and _EXPLICIT_INSTANTIATION.search(p.read_text())]
    assert len(found) > 50, "found too few explicit instantiations: the pattern is broken"
    hand = [str(p.relative_to(ROOT)) for p in found if p not in generated]
    assert not hand, f"explicit instantiations outside tools/gen_instantiations.py's files: {hand}"
    assert _EXPLICIT_INSTANTIATION.search("FOO\ntemplate cudaError_t run<T>(int);\n")
    assert not _EXPLICIT_INSTANTIATION.search("template <typename T>\nvoid f();\n")


def _assert_clean(kernels: list[dict]) -> None:
    """No spill, no stack frame, a register report within 255 registers, for every kernel record."""
    for k in kernels:
        assert k["spill_st"] == 0 and k["spill_ld"] == 0 and k["stack"] == 0, k
        assert k["regs"] is not None and k["regs"] <= 255, k


@needs_nvcc
def test_every_kernel_compiles_clean_for_every_target(resource_report: dict) -> None:
    assert resource_report["returncode"] == 0, resource_report["log"]
    archs = {k["arch"] for k in resource_report["kernels"]}
    assert archs >= {"sm_80", "sm_89", "sm_90a"}, archs
    _assert_clean(resource_report["kernels"])


@needs_nvcc
def test_cuda128_assembler_takes_every_kernel(resource_report: dict) -> None:
    """CUDA 12.8's ptxas (the image's toolkit for the L4 and H100) assembles every kernel's PTX
    for sm_89 and sm_90a with no spills, within the launch bounds: the same kernels the default
    toolkit reported, none missing."""
    if not PTXAS_128:
        if os.environ.get("FLASHATTN_REQUIRE_PTXAS_128") == "1":
            pytest.fail("FLASHATTN_REQUIRE_PTXAS_128=1 but FLASHATTN_PTXAS_128 is unset (.ci/run sets both)")
        pytest.skip("FLASHATTN_PTXAS_128 not set (CUDA 12.8's ptxas; tools/check_cuda128.sh runs the same check by hand)")
    assert resource_report["returncode"] == 0, resource_report["log"]
    also = resource_report["also"]
    assert "release 12.8" in also["ptxas"], also["ptxas"]
    assert also["archs"] == ["sm_89", "sm_90a"]
    got = {(k["arch"], k["name"]) for k in also["kernels"]}
    want = {(k["arch"], k["name"]) for k in resource_report["kernels"] if k["arch"] in also["archs"]}
    assert got == want, f"missing from 12.8: {sorted(want - got)[:5]}; extra: {sorted(got - want)[:5]}"
    _assert_clean(also["kernels"])


@needs_nvcc
def test_every_instantiated_config_was_compiled(resource_report: dict) -> None:
    compiled = {
        (k["arch"], k["head_dim"], k["block_m"], k["block_n"], k["warps"])
        for k in resource_report["kernels"]
        if "head_dim" in k
    }
    compiled_bwd = {
        (k["arch"], k["head_dim"], k["block_m"], k["block_n"], k["warps"])
        for k in resource_report["kernels"]
        if k.get("path") == "bwd"
    }
    for arch in ("sm_80", "sm_89", "sm_90a"):
        for c in resource_report["configs"]["configs"]:
            assert (arch, c["head_dim"], c["block_m"], c["block_n"], c["warps"]) in compiled, (arch, c)
        for c in resource_report["configs"]["bwd_configs"]:
            assert (arch, c["head_dim"], c["block_m"], c["block_n"], c["warps"]) in compiled_bwd, (arch, "bwd", c)


@needs_nvcc
def test_every_head_dim_has_a_config_within_each_arch_smem(resource_report: dict) -> None:
    selection = resource_report["configs"]["selection"]
    for arch, limit in (("sm_89", L4_SMEM_PER_BLOCK), ("sm_90a", H100_SMEM_PER_BLOCK)):
        assert selection[arch]["smem_limit"] == limit
        for table in ("by_head_dim", "bwd_by_head_dim"):  # forward, backward
            for d in range(8, 257, 8):
                c = selection[arch][table][str(d)]
                assert c is not None, f"{arch} {table}: head dim {d} has no config"
                assert c["smem_bytes"] <= limit, f"{arch} {table}: head dim {d} picks {c}, over {limit} B"
                assert c["head_dim"] >= d


@needs_nvcc
def test_window_and_softcap_backward_configs_carry_their_kernels(resource_report: dict) -> None:
    """A backward with a local window or a softcap runs kernels of its own (flash_bwd_kernel's
    kWindow/kSoftcap template flags), compiled only into the configs the launcher picks for such
    calls (compact first): for every head dim and target, the picked config has both compiled,
    and the configs it never picks do not carry them. The packed-batch flavour (kVarlen, the flag
    before them) takes the same route: the picked configs carry it, with and without the window
    and softcap flags, and no other config does."""
    selection = resource_report["configs"]["selection"]
    flagged: dict[tuple, set[str]] = {}
    for k in resource_report["kernels"]:
        if k.get("path") != "bwd" or "flash_bwd_kernel" not in k["name"]:
            continue
        key = (k["arch"], k["head_dim"], k["block_m"], k["block_n"], k["warps"], k["stages"])
        flags = k["name"].split("EEvNS_9BwdParamsEi")[0][-12:]  # "Lb<varlen>ELb<w>ELb<s>E" of the mangled name
        flagged.setdefault(key, set()).add(flags)
    picked = set()
    for arch in ("sm_80", "sm_89", "sm_90a"):
        for d in range(8, 257, 8):
            c = selection[arch]["bwd_window_by_head_dim"][str(d)]
            assert c is not None and c["head_dim"] >= d, (arch, d, c)
            key = (arch, c["head_dim"], c["block_m"], c["block_n"], c["warps"], c["stages"])
            picked.add(key)
            want = {f"Lb{v}ELb1ELb{c}E" for v in (0, 1) for c in (0, 1)} | {"Lb1ELb0ELb0E"}
            assert want <= flagged.get(key, set()), (arch, d, c, flagged.get(key))
    for key, flags in flagged.items():
        assert "Lb0ELb0ELb0E" in flags, key
        if key not in picked:
            assert flags == {"Lb0ELb0ELb0E"}, f"{key} carries window/softcap or packed kernels no call runs"


@needs_nvcc
def test_every_forward_config_has_both_flavours(resource_report: dict) -> None:
    """Packed variable-length batches run the portable forward's kVarlen flavour, a kernel of its
    own (csrc/flash_fwd/kernel.cuh), on whatever config the GPU selects: every config is compiled
    for every target both dense (Lb0E, the kernels as measured) and packed (Lb1E), and no packed
    kernel carries the dense one's name."""
    flavours: dict[tuple, set[str]] = {}
    for k in resource_report["kernels"]:
        if "flash_fwd_kernel" not in k["name"] or "sm90" in k["name"]:
            continue
        flag = k["name"].split("EEvNS_9FwdParamsEi")[0][-4:]  # "Lb<kVarlen>E" of the mangled name
        dtype = "bf16" if "__nv_bfloat16" in k["name"] else "fp16"
        key = (k["arch"], dtype, k["head_dim"], k["block_m"], k["block_n"], k["warps"])
        flavours.setdefault(key, set()).add((flag, "fwd_varlen_" in k["source"]))
    for arch in ("sm_80", "sm_89", "sm_90a"):
        for dtype in ("bf16", "fp16"):
            for c in resource_report["configs"]["configs"]:
                key = (arch, dtype, c["head_dim"], c["block_m"], c["block_n"], c["warps"])
                assert flavours.get(key) == {("Lb0E", False), ("Lb1E", True)}, (key, flavours.get(key))


@needs_nvcc
def test_hopper_gets_the_large_tiles(resource_report: dict) -> None:
    by_d = resource_report["configs"]["selection"]["sm_90a"]["by_head_dim"]
    assert {by_d[str(d)]["variant"] for d in range(8, 257, 8)} == {"large"}


# The checker itself must be able to fail: a spill, a stack frame, too many registers.
PTXAS_SAMPLE = """\
ptxas info    : Compiling entry function '_ZN9flashattn16flash_fwd_kernelINS_15FwdKernelTraitsILi128ELi128ELi32ELi4EEE13__nv_bfloat16EEvNS_9FwdParamsEi' for 'sm_90a'
ptxas info    : Function properties for _ZN9flashattn16flash_fwd_kernel
    16 bytes stack frame, 12 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers
"""


def test_ptxas_report_is_parsed() -> None:
    [k] = checker.parse_ptxas(PTXAS_SAMPLE)
    assert (k["arch"], k["regs"], k["stack"], k["spill_st"], k["spill_ld"]) == ("sm_90a", 255, 16, 12, 12)
    assert (k["head_dim"], k["block_m"], k["block_n"], k["warps"], k["threads"]) == (128, 128, 32, 4, 128)


SM90_PTXAS_SAMPLE = """\
ptxas info    : Compiling entry function '_ZN9flashattn4sm9021flash_fwd_sm90_kernelINS0_13Sm90FwdTraitsILi128ELi128ELi2ELb1ELi1ELb1ELi1ELi2ELb1EEE13__nv_bfloat16Lb1EEEvNS0_10Sm90ParamsE' for 'sm_90a'
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
ptxas info    : Compiling entry function '_ZN9flashattn4sm9021flash_fwd_sm90_kernelINS0_13Sm90FwdTraitsILi64ELi128ELi2ELb1ELi1ELb0ELi4ELi3ELb1EEE6__halfLb0EEEvNS0_10Sm90ParamsE' for 'sm_90a'
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
"""


def test_hopper_kernel_names_are_parsed() -> None:
    """Real mangled names (nvcc 13.0) of the Hopper kernel, every traits parameter spelled out:
    parsed with their thread count and query rows (from the consumer warpgroups), head dim, block N
    and schedule."""
    a, b = checker.parse_ptxas(SM90_PTXAS_SAMPLE)
    assert (a["head_dim"], a["block_n"], a["threads"], a["schedule"]) == (128, 128, 384, "dynamic")
    assert (b["head_dim"], b["block_n"], b["threads"], b["block_m"], b["schedule"]) == (64, 128, 512, 192, "static")
    otma_chains_wgs = [m.group(6, 7, 8) for m in map(checker.SM90_KERNEL.search, (a["name"], b["name"]))]
    assert otma_chains_wgs == [("1", "1", "2"), ("0", "4", "3")]


def test_checker_rejects_spills_and_oversized_selection() -> None:
    kernels = checker.parse_ptxas(PTXAS_SAMPLE)
    configs = {"selection": {"sm_89": {"smem_limit": 1000, "by_head_dim": {"64": {"smem_bytes": 2000}},
                                       "bwd_by_head_dim": {"128": {"smem_bytes": 3000}}}}}
    errors = checker.check(kernels, configs, ["sm_89", "sm_90a"])
    text = "\n".join(errors)
    assert "backward head dim 128 selects" in text
    assert "spills 12 B" in text and "stack frame" in text
    assert "over the 1000 B limit" in text
    assert "sm_90a: no selection report" in text


_SM90_D64 = "_ZN9flashattn4sm9021flash_fwd_sm90_kernelINS0_13Sm90FwdTraitsILi64ELi128ELi2ELb1ELi1ELb0ELi1ELi2ELb1EEE13__nv_bfloat16Lb1EEEvNS0_10Sm90ParamsE"
# What ptxas 13.0 printed for a forward whose first key block's two GEMMs (full and half width) were
# waited for after the branch: no spill, no stack, and every wgmma of the kernel serialized.
SERIALIZED_PTXAS_SAMPLE = f"""\
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in the function '{_SM90_D64}'
ptxas info    : Compiling entry function '{_SM90_D64}' for 'sm_90a'
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
"""


def test_checker_rejects_serialized_wgmma() -> None:
    [k] = checker.parse_ptxas(SERIALIZED_PTXAS_SAMPLE)
    assert k["wgmma_serialized"] == "C7515"
    errors = checker.check([k], {"selection": {}}, [])
    assert len(errors) == 1 and "serialized its wgmma instructions (C7515)" in errors[0]
    [clean] = checker.parse_ptxas(SERIALIZED_PTXAS_SAMPLE.split("\n", 1)[1])
    assert "wgmma_serialized" not in clean and checker.check([clean], {"selection": {}}, []) == []


# ---- tools/kernel_identity.py: matching kernels by body (no nvcc) -------------------------------------------

_PTX_KERNEL = """
.visible .entry {name}(
	.param .align 8 .b8 {name}_param_0[{size}]
)
.maxntid 128, 1, 1
{{
	.reg .pred 	%p<3>;
	ld.param.u32 	%r1, [{name}_param_0+{offset}];
	setp.ge.s32 	%p1, %r1, 4;
	@%p1 bra 	$L__BB{fn}_2;
	// a comment line
	add.s32 	%r2, %r1, 1;
$L__BB{fn}_2:
	ret;
}}
"""


def _ptx(*kernels: tuple[str, int, int]) -> str:
    """One PTX file of toy kernels (name, parameter block size, offset of the field read), numbered as nvcc does."""
    return "".join(_PTX_KERNEL.format(name=n, size=size, offset=off, fn=i) for i, (n, size, off) in enumerate(kernels))


def test_kernel_identity_matches_bodies_apart_from_names_labels_and_block_size() -> None:
    ki = load_repo_module("tools/kernel_identity.py")
    base = ki.split_kernels(_ptx(("k_contig", 312, 256)))["k_contig"]
    # A new kernel before it renumbers its labels ($L__BB0_2 -> $L__BB1_2), a template flag renames
    # it, and the parameter block grew at its end: the same code.
    head = ki.split_kernels(_ptx(("k_paged", 344, 300), ("k_contig_Lb0E", 344, 256)))
    assert head["k_contig_Lb0E"].body == base.body and head["k_contig_Lb0E"].param_bytes != base.param_bytes
    assert head["k_paged"].body != base.body  # reads another field: not the same code
    # A field that moved (its offset) is a change.
    assert ki.split_kernels(_ptx(("k_contig", 344, 264)))["k_contig"].body != base.body
    # Labels keep their block numbers: two blocks of one function stay distinct.
    assert any("$L__BB_2" in line for line in base.body) and not any("$L__BB0" in line for line in base.body)


# The lab's CUDA programs (lab/README.md), compiled as their scripts or header lines build them, for
# sm_90a and object code only: a GPU run that finds its lab broken costs device time. Programs that
# take a tile config (LAB_CONFIG_FILE) get the first one their script builds.
LAB_PROGRAMS: dict[str, tuple[list[str], str | None]] = {
    "bwd_lab.cu": (["-DLAB_D=64"], "LAB(128,128,8,2,2,4,1);"),
    "bwd_preprocess_lab.cu": ([], None),
    "decode_lab.cu": (["--expt-relaxed-constexpr"], None),
    "initcheck_tma.cu": ([], None),
    "kernel_lab.cu": (["-DLAB_D=64"], "LAB(128,64,4);"),
    "mufu_bench.cu": ([], None),
    "sm90_bwd_lab.cu": (["--expt-relaxed-constexpr"], None),
    "sm90_lab.cu": (["--expt-relaxed-constexpr", "-lineinfo"], None),
}
# Host programs that compare with CuTe: they need CUTLASS's headers, which their scripts fetch.
LAB_PROGRAMS_WITH_CUTLASS = ("sm90_bwd_desc_check.cu", "sm90_desc_check.cu")


def test_every_lab_program_is_compiled_here() -> None:
    on_disk = sorted(p.name for p in (ROOT / "lab").glob("*.cu"))
    assert on_disk == sorted([*LAB_PROGRAMS, *LAB_PROGRAMS_WITH_CUTLASS])


@needs_nvcc
@pytest.mark.parametrize("name", sorted(LAB_PROGRAMS))
def test_lab_program_compiles(name: str, tmp_path: pathlib.Path) -> None:
    flags, config = LAB_PROGRAMS[name]
    cmd = [NVCC, "-std=c++17", "-O3", f"-I{ROOT / 'csrc'}", "-gencode=arch=compute_90a,code=sm_90a", *flags]
    if config is not None:
        inc = tmp_path / "config.inc"
        inc.write_text(config + "\n")
        cmd.append(f'-DLAB_CONFIG_FILE="{inc}"')
    cmd += ["-c", str(ROOT / "lab" / name), "-o", str(tmp_path / "lab.o")]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, f"{name} does not compile:\n{r.stderr[-4000:]}"
