"""``ncclbot-sweep collect``: its failure path (the success path runs in test_campaign_e2e)."""

from __future__ import annotations

from click.testing import CliRunner

from ncclbot_sweep.cli import main


def test_collect_outside_a_campaign_folder_is_a_user_error(tmp_path):
    result = CliRunner().invoke(main, ["collect", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {tmp_path}: not a campaign folder (no manifest.sqlite)")


def test_collect_of_a_missing_folder_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["collect", str(tmp_path / "nope")])
    assert result.exit_code == 2
