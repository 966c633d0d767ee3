"""The TOML schema of ``recollect serve --config``: tables and service options, validated.

A file has an optional ``[service]`` table and one ``[tables.<name>]`` per table::

    [service]
    name = "apex"             # recollect.ray.connect("apex")  (default "recollect")
    num_shards = 1            # default shards per table
    placement = "default"     # or "spread" (shards on different nodes)
    max_restarts = 0          # Ray restarts of a dead shard (from its last checkpoint)
    lease_timeout_s = 60.0    # seconds after which an idle writer's rows pass on

    [tables.replay]
    capacity = 100_000        # steps, a multiple of num_envs
    num_envs = 16             # rows (envs of all writers together)
    sequence_length = 2       # optional: fixed window length (needed by Prioritized)
    max_times_sampled = 0     # optional: 0 = no limit
    num_shards = 1            # optional; this table's shards (default: service.num_shards)

    [tables.replay.spec]      # leaves {shape, dtype}; sub-tables nest
    observation = { shape = [4], dtype = "float32" }
    action = { shape = [], dtype = "int64" }

    [tables.replay.sampler]   # optional (default Uniform): type + constructor arguments
    type = "Prioritized"
    priority_exponent = 0.6

    [tables.replay.rate_limiter]  # optional: type + constructor arguments
    type = "SampleToInsertRatio"
    samples_per_insert = 8.0
    min_size_to_sample = 1000
    error_buffer = 4000.0

Every error is a :class:`ConfigError` naming the key, what it expects and
what it got.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import numpy as np

from recollect.arguments import is_int, is_number
from recollect.buffers import ReplayBuffer
from recollect.errors import InvalidArgumentError, RecollectError
from recollect.samplers import registered_sampler
from recollect.specs import ArraySpec
from recollect.table.rate_limiters import rate_limiter_from_config

__all__ = ["ConfigError", "ServiceConfig", "load_service_config", "parse_service_config"]

_SERVICE_KEYS = {"name", "num_shards", "placement", "max_restarts", "lease_timeout_s"}
_TABLE_KEYS = {"capacity", "num_envs", "spec", "sampler", "rate_limiter", "sequence_length",
               "max_times_sampled", "num_shards"}  # fmt: skip


class ConfigError(InvalidArgumentError):
    """A tables file that does not follow the schema (the message names the key)."""


@dataclasses.dataclass
class ServiceConfig:
    """A parsed file: arguments of ``recollect.ray.serve``."""

    name: str
    tables: dict[str, ReplayBuffer]
    num_shards: dict[str, int]
    placement: str
    max_restarts: int
    lease_timeout_s: float


def _type_name(value: Any) -> str:
    return type(value).__name__


def _fail(key: str, expected: str, value: Any) -> ConfigError:
    return ConfigError(f"`{key}` must be {expected}; got {value!r} ({_type_name(value)}).")


def _check_keys(
    key: str, table: Any, allowed: AbstractSet[str], required: AbstractSet[str] = frozenset()
) -> None:
    if not isinstance(table, dict):
        raise _fail(key, "a table", table)
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"unknown key `{key}.{unknown[0]}`; `{key}` takes {sorted(allowed)}.")
    missing = sorted(required - set(table))
    if missing:
        raise ConfigError(f"`{key}` needs `{missing[0]}` (required: {sorted(required)}).")


def _int(key: str, value: Any, minimum: int) -> int:
    if not is_int(value, minimum):
        raise _fail(key, f"an integer >= {minimum}", value)
    return int(value)


def _leaf(key: str, value: dict) -> ArraySpec:
    _check_keys(key, value, {"shape", "dtype"}, {"shape", "dtype"})
    shape, dtype = value["shape"], value["dtype"]
    if not isinstance(shape, list) or not all(is_int(d, minimum=0) for d in shape):
        raise _fail(f"{key}.shape", "a list of integers >= 0 (e.g. [84, 84] or [])", shape)
    try:
        if not isinstance(dtype, str):
            raise TypeError
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise _fail(f"{key}.dtype", 'a numpy dtype name (e.g. "float32", "uint8")', dtype) from None
    return ArraySpec(tuple(shape), np_dtype)


def _spec(key: str, value: Any) -> Any:
    if not isinstance(value, dict) or not value:
        raise _fail(key, "a non-empty table of leaves {shape, dtype} or sub-tables", value)
    if "shape" in value or "dtype" in value:
        return _leaf(key, value)
    return {name: _spec(f"{key}.{name}", sub) for name, sub in value.items()}


def _component(key: str, value: Any, build: Any) -> Any:
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise _fail(key, 'a table with a string `type` (e.g. { type = "Prioritized" })', value)
    args = {k: v for k, v in value.items() if k != "type"}
    try:
        return build(value["type"], args)
    except RecollectError as err:  # first: a wrong-type argument is also a TypeError
        raise ConfigError(f"`{key}`: {err}") from None
    except TypeError as err:  # an unknown or missing constructor argument
        raise ConfigError(f"`{key}` (type {value['type']!r}): {err}.") from None


def _table(key: str, value: Any) -> tuple[ReplayBuffer, int | None]:
    _check_keys(key, value, _TABLE_KEYS, {"capacity", "num_envs", "spec"})
    kwargs: dict[str, Any] = {}
    if "sampler" in value:
        kwargs["sampler"] = _component(
            f"{key}.sampler", value["sampler"], lambda t, a: registered_sampler(t)(**a)
        )
    if "rate_limiter" in value:
        kwargs["rate_limiter"] = _component(
            f"{key}.rate_limiter", value["rate_limiter"],
            lambda t, a: rate_limiter_from_config({"type": t, "config": a}),
        )  # fmt: skip
    if "sequence_length" in value:
        kwargs["sequence_length"] = _int(f"{key}.sequence_length", value["sequence_length"], 1)
    if "max_times_sampled" in value:
        kwargs["max_times_sampled"] = _int(
            f"{key}.max_times_sampled", value["max_times_sampled"], 0
        )
    capacity = _int(f"{key}.capacity", value["capacity"], 1)
    num_envs = _int(f"{key}.num_envs", value["num_envs"], 1)
    shards = value.get("num_shards")
    shards = None if shards is None else _int(f"{key}.num_shards", shards, 1)
    spec = _spec(f"{key}.spec", value["spec"])
    try:
        return ReplayBuffer(spec, capacity, num_envs, **kwargs), shards
    except RecollectError as err:
        raise ConfigError(f"`{key}`: {err}") from None


def parse_service_config(doc: dict[str, Any]) -> ServiceConfig:
    """Validates a parsed TOML document and builds its (empty) tables.

    Raises:
        ConfigError: the first key that breaks the schema, what it expects and what it got.
    """
    _check_keys("<file>", doc, {"service", "tables"}, {"tables"})
    service = doc.get("service", {})
    _check_keys("service", service, _SERVICE_KEYS)
    name = service.get("name", "recollect")
    if not isinstance(name, str) or not name or "/" in name:
        raise _fail("service.name", "a non-empty string without '/'", name)
    placement = service.get("placement", "default")
    if placement not in ("default", "spread"):
        raise _fail("service.placement", '"default" or "spread"', placement)
    max_restarts = service.get("max_restarts", 0)
    if max_restarts != -1:
        max_restarts = _int("service.max_restarts", max_restarts, 0)
    lease = service.get("lease_timeout_s", 60.0)
    if not is_number(lease) or lease <= 0:
        raise _fail("service.lease_timeout_s", "a number > 0 (seconds)", lease)
    default_shards = _int("service.num_shards", service.get("num_shards", 1), 1)
    tables = doc["tables"]
    if not isinstance(tables, dict) or not tables:
        raise _fail("tables", "a non-empty table of [tables.<name>] tables", tables)
    built: dict[str, ReplayBuffer] = {}
    shards: dict[str, int] = {}
    for table_name, value in tables.items():
        built[table_name], count = _table(f"tables.{table_name}", value)
        shards[table_name] = default_shards if count is None else count
    for table_name, buf in built.items():
        if buf.num_envs % shards[table_name]:
            raise ConfigError(
                f"`tables.{table_name}.num_envs` must be a multiple of num_shards="
                f"{shards[table_name]} (each shard holds num_envs / num_shards rows); got "
                f"{buf.num_envs}."
            )
    return ServiceConfig(name, built, shards, placement, max_restarts, float(lease))


def load_service_config(path: str | Path) -> ServiceConfig:
    """Reads and validates a tables file (see the module doc for the schema).

    Raises:
        ConfigError: the file is missing, is not TOML, or breaks the schema.
    """
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}.") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}.") from None
    try:
        return parse_service_config(doc)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
