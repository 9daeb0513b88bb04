"""App settings: defaults here, overridden by SPARSEGDN_* environment variables.

Server-level settings (address, port, upload size) live in app/.streamlit/config.toml;
`max_upload_mb` here must not exceed `server.maxUploadSize` there (the server
rejects bigger files before the app sees them).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from analysis.models import ModelError, check_device_name

REPO_ROOT = Path(__file__).resolve().parents[1]


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as error:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from error
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def _env_paths(name: str) -> list[Path] | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    return [Path(part).expanduser() for part in raw.split(os.pathsep) if part]


@dataclass(frozen=True)
class Settings:
    max_upload_mb: int = 20
    max_tokens: int = 131072
    # Where checkpoints may be loaded from; None = analysis.models' default (data/ and the HF cache).
    model_roots: list[Path] | None = None
    examples_dir: Path = REPO_ROOT / "data" / "examples"
    # None (the default) keeps runs in memory only: nothing of a document outlives the server.
    # A folder here also saves finished runs, so a shared link (?run=KEY) reopens after a restart.
    runs_dir: Path | None = None
    run_cache_size: int = 16
    runs_kept: int = 200  # saved runs beyond this many (oldest first) are deleted from runs_dir
    # Name of a prepared example in examples_dir to open on (teaching/demo mode), or None.
    demo: str | None = None
    device: str = "auto"
    # "none" (the whole model on `device`), "auto" or "balanced": spread over the visible GPUs
    # (analysis/placement.py), for a model larger than one GPU.
    device_map: str = "none"

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 1024 * 1024


def load_settings() -> Settings:
    """The settings from the environment; ValueError naming the variable whose value is wrong."""
    runs_dir_raw = os.environ.get("SPARSEGDN_RUNS_DIR")
    if runs_dir_raw is None:
        runs_dir = Settings.runs_dir
    else:
        runs_dir = Path(runs_dir_raw).expanduser() if runs_dir_raw.strip() else None
    if runs_dir is not None and runs_dir.exists() and not runs_dir.is_dir():
        raise ValueError(f"SPARSEGDN_RUNS_DIR: {runs_dir} is a file, not a folder")
    demo = os.environ.get("SPARSEGDN_DEMO", "").strip() or None
    return Settings(
        max_upload_mb=_env_int("SPARSEGDN_MAX_UPLOAD_MB", Settings.max_upload_mb),
        max_tokens=_env_int("SPARSEGDN_MAX_TOKENS", Settings.max_tokens),
        model_roots=_env_paths("SPARSEGDN_MODEL_ROOTS"),
        examples_dir=Path(os.environ.get("SPARSEGDN_EXAMPLES_DIR", Settings.examples_dir)),
        runs_dir=runs_dir,
        run_cache_size=_env_int("SPARSEGDN_RUN_CACHE", Settings.run_cache_size),
        runs_kept=_env_int("SPARSEGDN_RUNS_KEPT", Settings.runs_kept),
        demo=demo,
        device=_env_device("SPARSEGDN_DEVICE"),
        device_map=_env_device_map("SPARSEGDN_DEVICE_MAP"),
    )


def _env_device_map(name: str) -> str:
    from analysis.placement import DEVICE_MAPS

    raw = os.environ.get(name, "").strip() or "none"
    if raw not in DEVICE_MAPS:
        raise ValueError(f"{name} must be one of {', '.join(DEVICE_MAPS)}, got {raw!r}")
    return raw


def _env_device(name: str) -> str:
    raw = os.environ.get(name, "").strip() or "auto"
    try:
        return check_device_name(raw)
    except ModelError as error:
        raise ValueError(f"{name}: {error}") from None
