"""lab/ncu_source_top.py --compare on two hand-written source-page CSVs (ncu's layout: a preamble,
then a header row starting with "Address"): stall samples side by side, and the executed
instructions by opcode family with their ratio, guards and modifiers folded into the family."""

from __future__ import annotations

from repo_modules import load_repo_module

top = load_repo_module("lab/ncu_source_top.py")

_HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
           '"stall_wait","stall_mio","L1 Wavefronts Shared"')


def _csv(rows: list[tuple[str, str, int, int, int, int, int]]) -> str:
    lines = ["==PROF== a preamble line", _HEADER]
    lines += [",".join(f'"{x}"' for x in row) for row in rows]
    return "\n".join(lines) + "\n"


def test_compare_prints_executed_instructions_by_family(tmp_path, capsys) -> None:
    ours = tmp_path / "ours.csv"
    theirs = tmp_path / "theirs.csv"
    ours.write_text(_csv([
        ("0x0010", "@P0 ISETP.GE.AND P1, PT, R2, 0x8, PT", 50, 3_000_000, 40, 0, 0),
        ("0x0020", "ISETP.LT.AND P1, PT, R3, 0x9, P1", 10, 1_000_000, 5, 0, 0),
        ("0x0030", "MUFU.EX2 R4, R5", 100, 2_000_000, 20, 10, 0),
        ("0x0040", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24", 5, 500_000, 0, 0, 0),
    ]))
    theirs.write_text(_csv([
        ("0x0010", "ISETP.GE.AND P1, PT, R2, 0x8, PT", 30, 2_000_000, 10, 0, 0),
        ("0x0020", "MUFU.EX2 R4, R5", 90, 2_000_000, 25, 5, 0),
        ("0x0030", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24", 5, 500_000, 0, 0, 0),
    ]))
    assert top.main(["--compare", str(ours), str(theirs), "stall_wait"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split()}
    assert rows["ISETP"] == ["4.00", "2.00", "2.00"]  # both ISETP forms, one with a guard, as one family
    assert rows["MUFU"] == ["2.00", "2.00", "1.00"]
    assert rows["HGMMA"][:2] == ["0.50", "0.50"]
    assert "6.50" in out and "4.50" in out  # the totals
    assert top.executed_by_family(*top.load(str(theirs))) == {"ISETP": 2e6, "MUFU": 2e6, "HGMMA": 5e5}


def test_waits_lists_barrier_waits_and_splits_the_hot_loop(tmp_path, capsys) -> None:
    path = tmp_path / "k.csv"
    path.write_text(_csv([
        ("0x0010", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x30030], R11", 7, 1_000_000, 3, 0, 0),
        ("0x0020", "@!P0 BRA 0x0090", 40, 1_000_000, 1, 0, 0),
        ("0x0030", "MUFU.EX2 R4, R5", 100, 1_000_000, 20, 10, 0),
        ("0x0040", "FADD R6, R6, R4", 30, 600_000, 30, 0, 0),  # a 2x unrolled part: still the loop
        ("0x0050", "BAR.ARV R11, 0x100", 2, 1_000_000, 0, 0, 0),
        ("0x0060", "STS [R2], R3", 9, 16_000, 4, 5, 0),  # the epilogue: not the loop
        ("0x0090", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x30040], R3", 0, 9_000_000, 6, 0, 0),  # a spin
    ]))
    assert top.main(["--waits", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    tryw = next(line for line in lines if "0x30030" in line).split()
    assert tryw[:4] == ["0x0010", "1000000", "7", "40"]  # ran, samples here, samples of the branch after it
    assert any("BAR.ARV" in line for line in lines)
    hot = next(line for line in lines if "hot loop:" in line)
    rest = next(line for line in lines if "rest:" in line)
    assert hot.split(":", 1)[1].split() == ["64", "samples,", "wait", "54", "mio", "10"]  # wait 3 + 1 + 20 + 30
    assert rest.split(":", 1)[1].split() == ["15", "samples,", "wait", "10", "mio", "5"]  # the STS and the spin
