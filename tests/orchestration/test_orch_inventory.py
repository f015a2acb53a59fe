"""Inventory model: shipped files validate, bad files name file, line, field and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclbot_sweep.cli import main
from ncclbot_sweep.errors import InventoryError
from ncclbot_sweep.names import Arm, arm_invalid_reason
from ncclbot_sweep.resources import resource_dir
from ncclbot_sweep.sweep.campaign import parse_campaign_text, plan_campaign
from ncclbot_sweep.sweep.inventory import load_inventory, parse_inventory_text

SHIPPED = sorted(p.name for p in resource_dir("inventories").glob("*.yaml"))

MINIMAL = """\
name: tiny
gpus_per_node: 2
nccl_tests: {bin_dir: /opt/nccl-tests}
"""


def test_every_required_inventory_is_shipped():
    for name in ["h100-spectrumx.yaml", "gb200-mnnvl-on.yaml", "gb200-mnnvl-off.yaml",
                 "sim-h100.yaml", "sim-gb200-mnnvl-on.yaml", "sim-gb200-mnnvl-off.yaml"]:
        assert name in SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_inventories_validate(name):
    inventory = load_inventory(resource_dir("inventories") / name)
    assert inventory.name == name.removesuffix(".yaml")
    assert inventory.synthetic == name.startswith("sim-")
    if inventory.synthetic:
        assert inventory.scheduler.kind == "local" and inventory.nccl_tests.bin_dir == "sim"
        assert inventory.environment["NCCLBOT_SIM_FABRIC"] == inventory.name


def test_fabric_specific_settings():
    h100 = load_inventory("h100-spectrumx")
    assert h100.gpus_per_node == 8
    for var in ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_ADAPTIVE_ROUTING"):
        assert var in h100.environment
    on, off = load_inventory("gb200-mnnvl-on"), load_inventory("gb200-mnnvl-off")
    assert on.environment["NCCL_MNNVL_ENABLE"] == "1" and off.environment["NCCL_MNNVL_ENABLE"] == "0"
    assert "nvls" in on.offer().families and "nvls" not in off.offer().families
    assert on.environment["NVIDIA_IMEX_CHANNELS"] == "0" and on.environment["NCCL_CUMEM_ENABLE"] == "1"
    assert on.gpus_per_node == 4 and on.node_set(None).segment(16) == 16
    assert on.node_set(None).segment(32) == 16  # largest divisor of 32 inside an 18-node block


def test_mnnvl_can_count_a_block_as_one_nccl_node():
    on = load_inventory("gb200-mnnvl-on")
    assert on.nccl_view(16) == (16, 4)  # shipped: physical nodes, as the simulator counts
    blocks = parse_inventory_text(MINIMAL.replace("gpus_per_node: 2", "gpus_per_node: 4")
                                  + "node_sets: {nvl72: {block_nodes: 18}}\ndefault_node_set: nvl72\n"
                                  + "algorithms: {families: [tree, ring, nvls], mnnvl: true}\n")
    assert blocks.nccl_view(16) == (1, 64) and blocks.nccl_view(32) == (2, 64)
    # So NVLSTree is pruned inside one NVLink block when NCCL sees it as one node.
    nodes, gpus = blocks.nccl_view(8)
    assert arm_invalid_reason("AllReduce", Arm.parse("NVLSTree/Simple"), nodes=nodes, gpus_per_node=gpus,
                              offer=blocks.offer()) == "NVLSTree needs more than one node"
    nodes, gpus = on.nccl_view(8)
    assert arm_invalid_reason("AllReduce", Arm.parse("NVLSTree/Simple"), nodes=nodes, gpus_per_node=gpus,
                              offer=on.offer()) is None


def test_defaults_and_version_flags():
    inv = parse_inventory_text(MINIMAL)
    assert inv.access.kind == "local" and inv.access.accept_new_host_key is False
    assert inv.nccl_tests.per_iteration_json  # 2.19.6 default
    old = parse_inventory_text(MINIMAL.replace("{bin_dir: /opt/nccl-tests}",
                                               "{bin_dir: /opt/nccl-tests, version: '2.16.9'}"))
    assert not old.nccl_tests.per_iteration_json


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        (MINIMAL + "scheduler:\n  kind: slurm\n  partitoin: gpu\n", 6,
         "scheduler.partitoin: unknown key; allowed keys here: kind, partition"),
        (MINIMAL + "access:\n  kind: telnet\n", 5, "access.kind: Input should be 'local' or 'ssh'"),
        (MINIMAL.replace("gpus_per_node: 2", "gpus_per_node: zero"), 2, "gpus_per_node"),
        (MINIMAL + "algorithms:\n  families: [ring, sharp]\n", 5, "algorithms.families.1"),
        (MINIMAL + "environment:\n  BAD-NAME: x\n", 4, "environment variable names must match"),
        (MINIMAL + "access: {kind: ssh}\n", 4, "needs 'host'"),
        (MINIMAL + "scheduler:\n  partition: \"a\\nb\"\n", 5, "single line"),
        ("name: tiny\nnccl_tests: {bin_dir: x}\n", 1, "gpus_per_node: required field is missing"),
    ],
)
def test_bad_inventory_names_file_line_field(tmp_path: Path, text, line, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert needle in str(err)
    assert err.hint


def test_yaml_syntax_error_has_line(tmp_path: Path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\ngpus_per_node: [8\nfoo: bar\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.line is not None and "invalid YAML" in str(info.value)


def test_cli_inventory_check_ok_and_error(tmp_path: Path):
    runner = CliRunner()
    ok = runner.invoke(main, ["inventory", "check", str(resource_dir("inventories") / "h100-spectrumx.yaml")])
    assert ok.exit_code == 0, ok.output
    assert "fabric       h100-spectrumx" in ok.output
    assert "algorithms   nvls, ring, tree" in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(MINIMAL + "launcher:\n  kind: pdsh\n")
    result = runner.invoke(main, ["inventory", "check", str(bad)])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {bad}:5: invalid inventory: launcher.kind: Input should be 'srun' or 'mpirun'")
    assert "Traceback" not in result.output


def test_cli_missing_file():
    result = CliRunner().invoke(main, ["inventory", "check", "does/not/exist.yaml"])
    assert result.exit_code == 1
    assert "Error: does/not/exist.yaml: file not found" in result.output


@pytest.mark.parametrize(("launcher", "needle"), [
    ("{kind: srun, mpi: pmix}", "srun --mpi=pmix starts them: nccl-tests built with MPI=1 against an MPI with pmix"),
    ("{kind: srun, mpi: null}", "srun starts them with Slurm's default MPI plugin: nccl-tests built with MPI=1"),
    ("{kind: mpirun}", "mpirun starts them: nccl-tests built with MPI=1 against that mpirun's MPI"),
])
def test_inventory_check_says_which_nccl_tests_build_the_launcher_expects(tmp_path: Path, launcher, needle):
    """The job scripts start one process per GPU with -g 1: a build without MPI would run each rank alone."""
    path = tmp_path / "inv.yaml"
    path.write_text(MINIMAL + f"scheduler: {{kind: slurm}}\nlauncher: {launcher}\n")
    result = CliRunner().invoke(main, ["inventory", "check", str(path)])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("  build        ")]
    assert line.startswith("  build        one process per GPU (") and "-g 1" in line and needle in line
    assert "A build without MPI (one process per node with -g) cannot join nodes" in line
    plan = plan_campaign(parse_campaign_text(_ONE_STEP), load_inventory(path))
    assert plan.steps[0].args[plan.steps[0].args.index("-g") + 1] == "1"  # what the line promises


def test_inventory_check_of_the_local_executor_needs_no_mpi():
    result = CliRunner().invoke(main, ["inventory", "check", "sim-h100"])
    assert "  build        no MPI: the local executor's srun stand-in starts task 0" in result.output


_ONE_STEP = "name: one\nkind: forced\ncollectives: [AllReduce]\nnodes: [2]\nsizes: {min: 1K, max: 1K}\narms: [Ring/LL]\n"
