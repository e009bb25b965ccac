"""The framework table (`runtime.frameworks`) is the one list: the host's reading of an image's manifest finds a
framework by any distribution the in-image manifest knows (the host's copy once missed tensorflow-gpu, tf-nightly
and tensorflow-intel), and every other list of framework names is the table's."""

from __future__ import annotations

import pytest

from trainimg.imagebuild.builder import installed_versions
from trainimg.jobs.images import FRAMEWORK_CHOICES
from trainimg.recipe.loading import FRAMEWORKS as RECIPE_FRAMEWORKS
from trainimg.runtime import launch
from trainimg.runtime.frameworks import DISTRIBUTIONS, FRAMEWORKS, NAMES, RECIPE_NAMES


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_the_host_reads_the_framework_version_from_every_distribution_of_the_table(distribution: str) -> None:
    manifest = {"distributions": {distribution.replace("-", "_"): "9.9.9"}}
    assert installed_versions(manifest)["framework"] == "9.9.9"


def test_every_list_of_framework_names_is_the_tables() -> None:
    assert RECIPE_FRAMEWORKS is RECIPE_NAMES and FRAMEWORK_CHOICES is RECIPE_NAMES
    assert launch.FRAMEWORKS == ("auto", *NAMES)
    assert {name: f.module for name, f in FRAMEWORKS.items()} == {"pytorch": "torch", "tensorflow": "tensorflow",
                                                                  "jax": "jax"}
