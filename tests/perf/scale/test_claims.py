"""`trnsim claims`: every row names its claim, trnsim's figure and a command; spec claims are
checked against the catalog, simulated ones wait for --simulate."""

import json

from trnsim.perf.scale.claims import claims


def test_every_claim_has_a_figure_or_a_reason():
    rows = claims(simulate=False)
    assert len(rows) >= 12
    for row in rows:
        assert row.command and row.claim and row.source
        assert row.verdict in ("agrees", "differs", "not checked", "unsupported")
        if row.verdict in ("not checked", "unsupported"):
            assert row.why
        else:
            assert row.trnsim != "-"
    by_claim = {r.claim: r for r in rows}
    assert by_claim["83.2 PF of FP8 per Trn2 UltraServer"].trnsim.startswith("83.1 PF")
    assert by_claim["65 ExaFLOPS from 100,000 Trainium2 chips"].verdict == "agrees"
    assert by_claim["Trn2 has 4x the memory bandwidth of Trn1"].verdict == "differs"  # 3.3x


def test_claims_command_prints_json():
    from typer.testing import CliRunner

    from trnsim.cli import app

    out = CliRunner().invoke(app, ["claims", "--json"])
    assert out.exit_code == 0, out.output
    assert any("UltraServer" in r["claim"] for r in json.loads(out.output))
