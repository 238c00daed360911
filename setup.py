"""The package list for setuptools; everything else (package data included) is in pyproject.toml.

The task YAMLs stay in the repository's top-level tasks/ folder and are installed as the
package `harness.tasks` (its data: the YAMLs), so a plain (non-editable) install has them.
pyproject.toml's `packages.find` cannot add a package mapped from another folder, hence this file."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[
        *find_namespace_packages(include=["casu_dataset*", "harness*", "model_adapters*"]),
        "harness.tasks",
    ],
    package_dir={"harness.tasks": "tasks"},
)
