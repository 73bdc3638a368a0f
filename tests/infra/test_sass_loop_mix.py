"""lab/sass_loop_mix.py on a hand-written cuobjdump listing: the main loop is the backward branch
holding the most MMAs (not the longest one), and guards and modifiers do not split an opcode."""

from __future__ import annotations

from repo_modules import load_repo_module

mix = load_repo_module("lab/sass_loop_mix.py")

_SASS = """
\t\tFunction : _Z6kernelv
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   IMAD R2, R3, R4, R5 ;
        /*0020*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*0030*/               @P0 REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU desc[UR10][R74.64], R148 ;
        /*0040*/              @!P1 HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*0050*/               @P2 BRA 0x20 ;
        /*0060*/                   ISETP.GE.AND P0, PT, R1, R2, PT ;
        /*0070*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0080*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0090*/               @P0 BRA 0x0 ;
        /*00a0*/                   EXIT ;
\t\tFunction : _Z5otherv
        /*0000*/                   EXIT ;
"""


def test_the_main_loop_is_the_one_with_the_most_mmas(tmp_path) -> None:
    path = tmp_path / "k.sass"
    path.write_text(_SASS)
    funcs = mix.functions(str(path))
    assert sorted(funcs) == ["_Z5otherv", "_Z6kernelv"]
    body = mix.main_loop(funcs["_Z6kernelv"])
    # 0x20..0x50 holds two HMMA; the outer loop 0x0..0x90 holds them too but is found later with
    # the same count, so the first (inner) one wins.
    assert [a for a, _ in body] == [0x20, 0x30, 0x40, 0x50]
    assert [mix.opcode(x) for _, x in body] == ["HMMA", "REDG", "HMMA", "BRA"]


def test_main_prints_the_mix(tmp_path, capsys) -> None:
    path = tmp_path / "k.sass"
    path.write_text(_SASS)
    assert mix.main([str(path), "kernel"]) == 0
    out = capsys.readouterr().out
    assert "main loop 4 instructions, 2 MMA, 2 other (1.00 a MMA)" in out
    assert "HMMA:2" in out and "REDG:1" in out
    assert mix.main([str(path), "nothing-matches"]) == 1


def test_loops_and_range(tmp_path, capsys) -> None:
    path = tmp_path / "k.sass"
    path.write_text(_SASS)
    assert mix.mma_loops(mix.functions(str(path))["_Z6kernelv"]) == [(0x20, 0x50, 4, 2), (0x0, 0x90, 10, 2)]
    assert mix.main(["--loops", "--range", "60:80", str(path), "kernel"]) == 0
    out = capsys.readouterr().out
    assert "range 3 instructions, 0 MMA" in out and "ISETP:1" in out and "IADD3:2" in out
    assert "loop 20-50: 4 instructions, 2 MMA" in out and "loop 0-90: 10 instructions, 2 MMA" in out


_WAITS = """
\t\tFunction : _Z4stepv
        /*0000*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R88, gdesc[UR8], RZ, !UPT, gsb0 ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0030*/                   MUFU.TANH R24, R24 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   MUFU.TANH R25, R25 ;
        /*0060*/                   MUFU.EX2 R24, R24 ;
        /*0070*/               @P0 MUFU.EX2 R25, R25 ;
        /*0080*/              @!P1 WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0090*/                   EXIT ;
"""


def test_waits_count_what_lies_between_them(tmp_path, capsys) -> None:
    path = tmp_path / "k.sass"
    path.write_text(_WAITS)
    segs = mix.wait_segments(mix.functions(str(path))["_Z4stepv"])
    assert [(a, n) for a, n, _ in segs] == [(0x20, 1), (0x40, 0), (0x80, 0)]
    assert segs[0][2] == {"HGMMA": 2}
    assert segs[1][2] == {"MUFU.TANH": 1}
    assert segs[2][2] == {"MUFU.TANH": 1, "MUFU.EX2": 2}  # a guarded MUFU counts as its function
    assert mix.main(["--waits", str(path), "step"]) == 0
    out = capsys.readouterr().out
    assert "wait 40 (<= 0 pending): since the wait before, MUFU.TANH 1" in out
    assert "wait 80 (<= 0 pending): since the wait before, MUFU.EX2 2, MUFU.TANH 1" in out
