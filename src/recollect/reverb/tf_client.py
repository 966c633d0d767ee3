"""Reverb's ``TFClient`` on :mod:`recollect.reverb`: sample, insert and update
priorities as TensorFlow ops (needs TensorFlow).

Each method builds a ``tf.numpy_function`` calling the Python
:class:`~recollect.reverb.Client`, so it runs eagerly, inside ``tf.function``
and in ``tf.compat.v1`` sessions (the op runs when the session runs it).
Build-time checks raise Reverb's ``ValueError``s with its messages; run-time
failures surface as ``tf.errors.InvalidArgumentError`` (a missing table, a
dtype mismatch, ``keys``/``priorities`` of different lengths; Reverb raises
``NotFoundError`` for a missing table and ``InternalError`` for a dtype mismatch, which a
``numpy_function`` cannot) with the reason in the message.

``sample`` returns one item's first time step, as Reverb's op does (an item
written by ``insert`` or the legacy writer has one step: the whole item);
``info`` fields are scalars, data shapes are unknown at build time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from recollect.errors import InvalidArgumentError
from recollect.reverb import signature as _signature
from recollect.reverb.client import Client
from recollect.reverb.replay_sample import ReplaySample, SampleInfo

__all__ = ["TFClient"]


class TFClient:
    """A client of the server at ``server_address`` whose calls are TensorFlow ops.

    Args:
        server_address: ``"host:port"``.
        shared_name: accepted for Reverb's signature (TF-Agents passes one); unused.
        name: the name scope of the ops.
    """

    def __init__(
        self, server_address: str, shared_name: str | None = None, name: str = "reverb"
    ) -> None:
        self._name = name
        self._server_address = server_address
        self._client: Client | None = None

    @property
    def server_address(self) -> str:
        return self._server_address

    def _py_client(self) -> Client:
        if self._client is None:
            self._client = Client(self._server_address)
        return self._client

    def sample(self, table: str, data_dtypes: Any, name: str | None = None) -> ReplaySample:
        """Samples one item of ``table``: a ``ReplaySample`` of scalar info tensors and
        ``data`` nested like ``data_dtypes`` (its first time step).

        Raises (at run time): ``tf.errors.InvalidArgumentError`` when the table does not
        exist or the item's columns do not match ``data_dtypes`` in count or dtype.
        """
        flat = [tf.as_dtype(d) for d in tf.nest.flatten(data_dtypes)]
        info_dtypes = list(SampleInfo.tf_dtypes())

        def run(table_name: Any) -> list[np.ndarray]:
            name_ = _text(table_name)
            out = self._py_client().sample_batch(name_, 1)
            info, columns = out
            if len(columns) != len(flat):
                raise InvalidArgumentError(
                    "Number of tensors in the replay sample did not match the expected count. "
                    f"Got {len(columns) + 5} but wanted {len(flat) + 5}: pass one dtype per "
                    f"column of the items of table '{name_}'."
                )
            values = []
            for i, (dtype, column) in enumerate(zip(flat, columns, strict=True)):
                got = _signature.dtype_name(column.dtype)
                want = (
                    "string" if dtype == tf.string else _signature.dtype_name(dtype.as_numpy_dtype)
                )
                if got != want:
                    raise InvalidArgumentError(
                        f"Type mismatch: actual {got} vs. expect {want} (column {i} of table "
                        f"'{name_}'): pass the column's dtype in data_dtypes."
                    )
                row = column[0]
                # items written step by step keep a time axis: Reverb's op returns step 0
                values.append(row[0] if row.ndim >= 1 and _stepped(columns) else row)
            fields = [
                np.asarray(f, d.as_numpy_dtype).reshape(())
                for f, d in zip(info, info_dtypes, strict=True)
            ]
            return [*fields, *values]

        with tf.name_scope(name or f"{self._name}_sample"):
            out = _op(run, [table], info_dtypes + flat)
        return ReplaySample(
            info=SampleInfo(*out[:5]), data=tf.nest.pack_sequence_as(data_dtypes, list(out[5:]))
        )

    def insert(
        self,
        data: Sequence[Any],
        tables: Any,
        priorities: Any,
        name: str | None = None,
    ) -> Any:
        """Inserts one step of ``data`` (a list of tensors, one per column) as an item into
        each of ``tables`` with the matching one of ``priorities``.

        Returns:
            None when executing eagerly, else the op to run.

        Raises:
            ValueError: ``tables`` is not a rank-1 string tensor, ``priorities`` not a rank-1
                float64 tensor, or their shapes differ (Reverb's messages).
        """
        if tables.dtype != tf.string or tables.shape.rank != 1:
            raise InvalidArgumentError("tables must be a string tensor of rank 1")
        if priorities.dtype != tf.float64 or priorities.shape.rank != 1:
            raise InvalidArgumentError("priorities must be a float64 tensor of rank 1")
        if not tables.shape.is_compatible_with(priorities.shape):
            raise InvalidArgumentError("priorities and tables must have the same shape")
        data = [tf.convert_to_tensor(x) for x in data]

        def run(names: np.ndarray, prios: np.ndarray, *columns: np.ndarray) -> np.ndarray:
            if names.shape != prios.shape:
                raise InvalidArgumentError(
                    f"tables and priorities must have the same shape; got {names.shape} and "
                    f"{prios.shape}."
                )
            with self._py_client().writer(max_sequence_length=1) as writer:
                writer.append(list(columns))
                for table, priority in zip(names.tolist(), prios.tolist(), strict=True):
                    writer.create_item(_text(table), 1, priority)
            return np.zeros((), np.int64)

        with tf.name_scope(name or f"{self._name}_insert"):
            op = _op(run, [tables, priorities, *data], tf.int64)
        return None if tf.executing_eagerly() else op.op

    def update_priorities(
        self, table: str, keys: Any, priorities: Any, name: str | None = None
    ) -> Any:
        """Sets the priorities of ``keys`` (uint64 ``[N]``) to ``priorities`` (float64
        ``[N]``); keys no longer in the table are ignored.

        Returns:
            None when executing eagerly, else the op to run.

        Raises:
            ValueError: ``keys`` is not uint64 or ``priorities`` not float64 (at build time,
                as TensorFlow's conversion raises it); ``tf.errors.InvalidArgumentError`` at
                run time for different lengths or a missing table.
        """
        keys = tf.convert_to_tensor(keys, tf.uint64)
        priorities = tf.convert_to_tensor(priorities, tf.float64)

        def run(table_name: Any, k: np.ndarray, p: np.ndarray) -> np.ndarray:
            if k.shape != p.shape:
                raise InvalidArgumentError(
                    f"Tensors `keys` and `priorities` do not match in shape "
                    f"({_signature.shape_text(k.shape)} vs. {_signature.shape_text(p.shape)})"
                )
            name_ = _text(table_name)
            self._py_client().update_priorities(name_, k, p)
            return np.zeros((), np.int64)

        with tf.name_scope(name or f"{self._name}_update_priorities"):
            op = _op(run, [table, keys, priorities], tf.int64)
        return None if tf.executing_eagerly() else op.op


def _op(fn: Any, inputs: list[Any], dtypes: Any) -> Any:
    """``tf.numpy_function(fn, ...)``; run eagerly, a Python error from ``fn`` is raised as
    the ``tf.errors`` error a graph run gives (``InvalidArgumentError`` for a ValueError or
    TypeError, else ``UnknownError``), the original as its cause."""
    if not tf.executing_eagerly():
        return tf.numpy_function(fn, inputs, dtypes, stateful=True)
    try:
        return tf.numpy_function(fn, inputs, dtypes, stateful=True)
    except tf.errors.OpError:
        raise
    except (ValueError, TypeError) as err:
        raise tf.errors.InvalidArgumentError(None, None, f"{type(err).__name__}: {err}") from err
    except Exception as err:
        raise tf.errors.UnknownError(None, None, f"{type(err).__name__}: {err}") from err


def _text(value: Any) -> str:
    """A string tensor's value as ``str``: ``numpy_function`` passes ``bytes`` in graph mode
    and a 0-d object array of ``bytes`` when executing eagerly."""
    if isinstance(value, np.ndarray):
        value = value.item()
    return value.decode() if isinstance(value, bytes) else str(value)


def _stepped(columns: list[np.ndarray]) -> bool:
    """Whether the sampled ``[1, ...]`` columns all carry a time axis of one length."""
    lengths = {c.shape[1] if c.ndim >= 2 else -1 for c in columns}
    return len(lengths) == 1 and -1 not in lengths
