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
