"""Where the YAML tree is, and the files of it that code reads directly (the shipped Criteo
feature schema)."""

from functools import cache
from pathlib import Path

from dlrm_exp.config.schema import FeatureSchema, load_schema_file


def conf_dir() -> Path:
    """The ``conf/`` tree Hydra composes from.

    In a source checkout (and an editable install) it is the repository's top-level ``conf/``;
    a wheel carries the same files as the package data ``dlrm_exp/conf/`` (``pyproject.toml``
    maps ``dlrm_exp.conf`` to ``conf/``), so ``python -m dlrm_exp`` finds its config wherever
    the package is installed.

    Raises:
        FileNotFoundError: neither place holds ``config.yaml`` (a broken install).
    """
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "conf", package.parents[1] / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"no conf/config.yaml next to {package} or in its source checkout")


def criteo_schema(table_sizes: list[int] | None = None) -> FeatureSchema:
    """The shipped Criteo feature schema (``conf/data/schema/criteo.yaml``), its tables sized
    ``table_sizes`` (one per feature, in order; None: the file's 100,000 rows), as
    ``data=criteo_tsv`` uses it once the model group sized it.

    Raises:
        ConfigError: ``table_sizes`` does not list one positive size per feature.
    """
    schema = load_schema_file(conf_dir() / "data" / "schema" / "criteo.yaml")
    return schema if table_sizes is None else schema.sized(table_sizes, "table_sizes")


def criteo_num_embeddings() -> dict[str, int]:
    """``{feature: num_embeddings}`` of the shipped Criteo schema file (read once a process:
    every compose of ``data=criteo_tsv`` compares against it)."""
    return dict(_criteo_num_embeddings())


@cache
def _criteo_num_embeddings() -> dict[str, int]:
    return {name: f.num_embeddings for name, f in criteo_schema().sparse.items()}
