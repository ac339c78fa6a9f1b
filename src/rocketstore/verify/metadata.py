"""The store's small files: the checkpoint (only its size is checked), the ``config/`` directory
(it must be one), and the geometry the checks assume."""

from __future__ import annotations

from rocketstore.codec.checkpoint import CHECKPOINT_FILE_SIZE
from rocketstore.config import StoreConfig
from rocketstore.errors import StorePathError
from rocketstore.geometry import survey_geometry
from rocketstore.storage.paths import StoreLayout, store_file_size
from rocketstore.verify.listing import list_entries, wrong_kind
from rocketstore.verify.report import DamageLog

__all__ = ["check_checkpoint", "check_config_dir", "geometry"]


def geometry(paths: StoreLayout, config: StoreConfig | None) -> StoreConfig:
    """``config``, else the geometry most of the files were written with (where they disagree,
    the checks report the odd ones)."""
    return config if config is not None else survey_geometry(paths.root)[0]


def check_config_dir(paths: StoreLayout, damage: DamageLog) -> None:
    """Its JSON tables are not checked here, but it must be a directory a store can open."""
    list_entries(paths, paths.config, damage)


def check_checkpoint(paths: StoreLayout, damage: DamageLog) -> None:
    """Only the size: RocketMQ tolerates any times in it (zero ones included)."""
    try:
        size = store_file_size(paths.checkpoint)
    except StorePathError as exc:
        wrong_kind(paths, paths.checkpoint, exc.found, exc.expected, damage)
        return
    except FileNotFoundError:
        return  # created at the next open
    if size != CHECKPOINT_FILE_SIZE:
        damage.add(
            "file_size",
            "checkpoint",
            min(size, CHECKPOINT_FILE_SIZE),
            f"{size} bytes, expected {CHECKPOINT_FILE_SIZE}",
        )
