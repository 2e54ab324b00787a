import subprocess
import sys

import pytest

from flopwatch.cli import main
from flopwatch.devices import DEVICES, get_device, normalize_dtype
from flopwatch.errors import InputError
from flopwatch.units import counter_delta, unwrap_counter


def test_cli_version(capsys):
    assert main(["--version"]) == 0
    assert "flopwatch" in capsys.readouterr().out


def test_cli_unknown_command_exits_2(capsys):
    assert main(["no-such-command"]) == 2


def test_core_import_is_light():
    code = "import sys, flopwatch, flopwatch.cli; bad = [m for m in ('torch', 'pynvml', 'amdsmi', 'matplotlib') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_input_error_message_names_file_record_field():
    e = InputError("is NaN", file="r.json", record="d256", field="net_energy_j")
    assert str(e) == "r.json: record 'd256': field 'net_energy_j': is NaN"
    assert e.exit_code == 2


def test_devices_lookup_and_peaks():
    a100 = get_device("NVIDIA A100-SXM4-80GB")
    assert a100.key == "a100"
    assert a100.peak("float32") == pytest.approx(19.5e12)
    assert a100.peak("tf32") == pytest.approx(156e12)
    assert get_device("NVIDIA H200").key == "h200"
    for key in ("a100", "h100", "h200", "l40", "l4", "orin-nano"):
        assert key in DEVICES and DEVICES[key].sources
    with pytest.raises(InputError):
        get_device("no such gpu")
    with pytest.raises(InputError):
        DEVICES["quadro-rtx-5000"].peak("bf16")
    assert normalize_dtype("torch.bfloat16") == "bf16"


def test_counter_helpers():
    assert counter_delta(10, 15) == 5
    assert counter_delta(90, 5, max_range=100) == 15
    assert counter_delta(90, 5) is None  # reset: unknowable
    d = unwrap_counter([0, 50, 95, 10, 20], max_range=100)
    assert list(d) == [0, 50, 45, 15, 10]
    assert str(unwrap_counter([0, 5, 1])[2]) == "nan"


def test_usage_errors_are_one_line(capsys):
    assert main(["evaluate", "--splits", "abc", "x.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flopwatch: error:") and "--splits" in err[0]


def test_ci_runs_exactly_the_readme_test_command():
    """`.ci/run` must call the README's test command verbatim, and the README's main job must be `run`."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    readme = (repo / "README.md").read_text()
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```bash\n")[1:]]
    main_cmd, test_cmd = blocks[0], blocks[1]
    assert main_cmd.startswith("pip install torch==2.13.0") and "flopwatch run --quick" in main_cmd
    assert test_cmd.startswith("pip install torch==2.13.0") and "pytest" in test_cmd
    ci_lines = [ln.strip() for ln in (repo / ".ci" / "run").read_text().splitlines()]
    assert test_cmd in ci_lines


def test_ci_uses_its_own_venv_and_runs_the_full_hypothesis_volume():
    """A missing install step must fail CI as it fails a newcomer: .ci/run builds a fresh venv and installs into
    it, and runs every property-based test again at its full volume."""
    from pathlib import Path

    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "python3 -m venv" in ci and '. "$VENV_DIR/venv/bin/activate"' in ci
    assert ci.index("-m venv") < ci.index("pip install torch")
    assert "FLOPWATCH_HYPOTHESIS=full python -m pytest -q -p no:cacheprovider -m hypothesis" in ci
    assert "collected no tests" in ci  # pytest's exit 5 is a failure, said plainly


def test_dev_extra_declares_every_package_tests_and_benchmarks_import():
    """Every third-party module imported by tests/ and benchmarks/ comes from a declared requirement (the 2026-12-01
    newcomer's fresh venv failed on `click` and `yaml`)."""
    import ast
    import re
    import sys
    from importlib.metadata import packages_distributions
    from pathlib import Path

    try:
        import tomllib
    except ImportError:  # Python 3.10: the tomli backport (a declared dependency there)
        import tomli as tomllib

    repo = Path(__file__).resolve().parents[1]
    proj = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    reqs = list(proj["dependencies"]) + [r for rs in proj["optional-dependencies"].values() for r in rs]
    declared = {re.split(r"[<>=;\[ !~]", r, maxsplit=1)[0].strip().lower().replace("_", "-") for r in reqs}
    local = {p.stem for d in ("tests", "tests/hostile", "benchmarks") for p in (repo / d).glob("*.py")}
    optional_backends = {"pynvml", "amdsmi"}  # vendor libraries: those tests skip without them, saying why
    dists = packages_distributions()
    missing = set()
    for f in [*(repo / "tests").rglob("*.py"), *(repo / "benchmarks").glob("*.py")]:
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                if (
                    top in sys.stdlib_module_names
                    or top in local
                    or top in optional_backends
                    or top == "flopwatch"
                ):
                    continue
                found = {d.lower().replace("_", "-") for d in dists.get(top, [top])}
                if not found & declared:
                    missing.add(f"{f.relative_to(repo)}: {top}")
    assert not missing, sorted(missing)
