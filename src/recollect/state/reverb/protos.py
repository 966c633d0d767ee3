"""The protobuf messages of a dm-reverb 0.14 checkpoint, declared at runtime.

Only what reading a checkpoint needs, with Reverb's and TensorFlow's field numbers and
full names (``deepmind.reverb.ChunkData``, ``tensorflow.TensorProto``, ...), built with
``descriptor_pb2`` in a private descriptor pool: no ``protoc`` step, no TensorFlow import,
and no clash with TensorFlow's own definitions when TensorFlow is loaded too.

Call :func:`messages` for the message classes (built once, then cached).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from recollect.extras import missing_extra

__all__ = ["messages"]

# (name, number, type, label, type_name); type and label as FieldDescriptorProto names
_Field = tuple[str, int, str, str, str]

_OPT, _REP = "LABEL_OPTIONAL", "LABEL_REPEATED"

_DATA_TYPES = [
    ("DT_INVALID", 0), ("DT_FLOAT", 1), ("DT_DOUBLE", 2), ("DT_INT32", 3), ("DT_UINT8", 4),
    ("DT_INT16", 5), ("DT_INT8", 6), ("DT_STRING", 7), ("DT_COMPLEX64", 8), ("DT_INT64", 9),
    ("DT_BOOL", 10), ("DT_QINT8", 11), ("DT_QUINT8", 12), ("DT_QINT32", 13),
    ("DT_BFLOAT16", 14), ("DT_QINT16", 15), ("DT_QUINT16", 16), ("DT_UINT16", 17),
    ("DT_COMPLEX128", 18), ("DT_HALF", 19), ("DT_RESOURCE", 20), ("DT_VARIANT", 21),
    ("DT_UINT32", 22), ("DT_UINT64", 23),
]  # fmt: skip

# message name (nested: "Outer.Inner") -> fields; one dict per declared .proto file
_TENSOR_FILE: dict[str, Any] = {
    "TensorShapeProto": [
        ("dim", 2, "TYPE_MESSAGE", _REP, ".tensorflow.TensorShapeProto.Dim"),
        ("unknown_rank", 3, "TYPE_BOOL", _OPT, ""),
    ],
    "TensorShapeProto.Dim": [
        ("size", 1, "TYPE_INT64", _OPT, ""),
        ("name", 2, "TYPE_STRING", _OPT, ""),
    ],
    "TensorProto": [
        ("dtype", 1, "TYPE_ENUM", _OPT, ".tensorflow.DataType"),
        ("tensor_shape", 2, "TYPE_MESSAGE", _OPT, ".tensorflow.TensorShapeProto"),
        ("version_number", 3, "TYPE_INT32", _OPT, ""),
        ("tensor_content", 4, "TYPE_BYTES", _OPT, ""),
        ("float_val", 5, "TYPE_FLOAT", _REP, ""),
        ("double_val", 6, "TYPE_DOUBLE", _REP, ""),
        ("int_val", 7, "TYPE_INT32", _REP, ""),
        ("string_val", 8, "TYPE_BYTES", _REP, ""),
        ("scomplex_val", 9, "TYPE_FLOAT", _REP, ""),
        ("int64_val", 10, "TYPE_INT64", _REP, ""),
        ("bool_val", 11, "TYPE_BOOL", _REP, ""),
        ("dcomplex_val", 12, "TYPE_DOUBLE", _REP, ""),
        ("half_val", 13, "TYPE_INT32", _REP, ""),
        ("uint32_val", 16, "TYPE_UINT32", _REP, ""),
        ("uint64_val", 17, "TYPE_UINT64", _REP, ""),
    ],
    "NoneValue": [],
    "StructuredValue": [
        ("none_value", 1, "TYPE_MESSAGE", _OPT, ".tensorflow.NoneValue"),
        ("float64_value", 11, "TYPE_DOUBLE", _OPT, ""),
        ("int64_value", 12, "TYPE_SINT64", _OPT, ""),
        ("string_value", 13, "TYPE_STRING", _OPT, ""),
        ("bool_value", 14, "TYPE_BOOL", _OPT, ""),
        ("tensor_shape_value", 31, "TYPE_MESSAGE", _OPT, ".tensorflow.TensorShapeProto"),
        ("tensor_dtype_value", 32, "TYPE_ENUM", _OPT, ".tensorflow.DataType"),
        ("tensor_spec_value", 33, "TYPE_MESSAGE", _OPT, ".tensorflow.TensorSpecProto"),
        ("type_spec_value", 34, "TYPE_MESSAGE", _OPT, ".tensorflow.TypeSpecProto"),
        (
            "bounded_tensor_spec_value",
            35,
            "TYPE_MESSAGE",
            _OPT,
            ".tensorflow.BoundedTensorSpecProto",
        ),
        ("list_value", 51, "TYPE_MESSAGE", _OPT, ".tensorflow.ListValue"),
        ("tuple_value", 52, "TYPE_MESSAGE", _OPT, ".tensorflow.TupleValue"),
        ("dict_value", 53, "TYPE_MESSAGE", _OPT, ".tensorflow.DictValue"),
        ("named_tuple_value", 54, "TYPE_MESSAGE", _OPT, ".tensorflow.NamedTupleValue"),
        ("tensor_value", 55, "TYPE_MESSAGE", _OPT, ".tensorflow.TensorProto"),
        ("numpy_value", 56, "TYPE_MESSAGE", _OPT, ".tensorflow.TensorProto"),
    ],
    "ListValue": [("values", 1, "TYPE_MESSAGE", _REP, ".tensorflow.StructuredValue")],
    "TupleValue": [("values", 1, "TYPE_MESSAGE", _REP, ".tensorflow.StructuredValue")],
    "DictValue": [("fields", 1, "TYPE_MESSAGE", _REP, ".tensorflow.DictValue.FieldsEntry")],
    "DictValue.FieldsEntry": [
        ("key", 1, "TYPE_STRING", _OPT, ""),
        ("value", 2, "TYPE_MESSAGE", _OPT, ".tensorflow.StructuredValue"),
    ],
    "PairValue": [
        ("key", 1, "TYPE_STRING", _OPT, ""),
        ("value", 2, "TYPE_MESSAGE", _OPT, ".tensorflow.StructuredValue"),
    ],
    "NamedTupleValue": [
        ("name", 1, "TYPE_STRING", _OPT, ""),
        ("values", 2, "TYPE_MESSAGE", _REP, ".tensorflow.PairValue"),
    ],
    "TensorSpecProto": [
        ("name", 1, "TYPE_STRING", _OPT, ""),
        ("shape", 2, "TYPE_MESSAGE", _OPT, ".tensorflow.TensorShapeProto"),
        ("dtype", 3, "TYPE_ENUM", _OPT, ".tensorflow.DataType"),
    ],
    "BoundedTensorSpecProto": [
        ("name", 1, "TYPE_STRING", _OPT, ""),
        ("shape", 2, "TYPE_MESSAGE", _OPT, ".tensorflow.TensorShapeProto"),
        ("dtype", 3, "TYPE_ENUM", _OPT, ".tensorflow.DataType"),
        ("minimum", 4, "TYPE_MESSAGE", _OPT, ".tensorflow.TensorProto"),
        ("maximum", 5, "TYPE_MESSAGE", _OPT, ".tensorflow.TensorProto"),
    ],
    "TypeSpecProto": [
        ("type_spec_class", 1, "TYPE_INT32", _OPT, ""),
        ("type_state", 2, "TYPE_MESSAGE", _OPT, ".tensorflow.StructuredValue"),
        ("type_spec_class_name", 3, "TYPE_STRING", _OPT, ""),
        ("num_flat_components", 4, "TYPE_INT32", _OPT, ""),
    ],
}
_TIMESTAMP = {
    "Timestamp": [
        ("seconds", 1, "TYPE_INT64", _OPT, ""),
        ("nanos", 2, "TYPE_INT32", _OPT, ""),
    ]
}

_R = ".deepmind.reverb."
_REVERB_FILE: dict[str, Any] = {
    "KeyDistributionOptions": [
        ("fifo", 1, "TYPE_BOOL", _OPT, ""),
        ("uniform", 2, "TYPE_BOOL", _OPT, ""),
        ("prioritized", 3, "TYPE_MESSAGE", _OPT, _R + "KeyDistributionOptions.Prioritized"),
        ("heap", 4, "TYPE_MESSAGE", _OPT, _R + "KeyDistributionOptions.Heap"),
        ("lifo", 6, "TYPE_BOOL", _OPT, ""),
        ("is_deterministic", 7, "TYPE_BOOL", _OPT, ""),
    ],
    "KeyDistributionOptions.Prioritized": [("priority_exponent", 1, "TYPE_DOUBLE", _OPT, "")],
    "KeyDistributionOptions.Heap": [("min_heap", 1, "TYPE_BOOL", _OPT, "")],
    "RateLimiterCheckpoint": [
        ("samples_per_insert", 2, "TYPE_DOUBLE", _OPT, ""),
        ("min_diff", 3, "TYPE_DOUBLE", _OPT, ""),
        ("max_diff", 4, "TYPE_DOUBLE", _OPT, ""),
        ("min_size_to_sample", 5, "TYPE_INT64", _OPT, ""),
        ("sample_count", 6, "TYPE_INT64", _OPT, ""),
        ("insert_count", 7, "TYPE_INT64", _OPT, ""),
        ("delete_count", 8, "TYPE_INT64", _OPT, ""),
    ],
    "PriorityTableCheckpoint": [
        ("table_name", 1, "TYPE_STRING", _OPT, ""),
        ("deprecated_items", 2, "TYPE_MESSAGE", _REP, _R + "PrioritizedItem"),
        ("rate_limiter", 3, "TYPE_MESSAGE", _OPT, _R + "RateLimiterCheckpoint"),
        ("sampler", 4, "TYPE_MESSAGE", _OPT, _R + "KeyDistributionOptions"),
        ("remover", 5, "TYPE_MESSAGE", _OPT, _R + "KeyDistributionOptions"),
        ("max_size", 6, "TYPE_INT64", _OPT, ""),
        ("max_times_sampled", 7, "TYPE_INT32", _OPT, ""),
        ("num_deleted_episodes", 8, "TYPE_INT64", _OPT, ""),
        ("signature", 9, "TYPE_MESSAGE", _OPT, ".tensorflow.StructuredValue"),
        ("num_unique_samples", 10, "TYPE_INT64", _OPT, ""),
    ],
    "SequenceRange": [
        ("episode_id", 1, "TYPE_UINT64", _OPT, ""),
        ("start", 2, "TYPE_INT32", _OPT, ""),
        ("end", 3, "TYPE_INT32", _OPT, ""),
        ("sparse", 4, "TYPE_BOOL", _OPT, ""),
    ],
    "ChunkData": [
        ("chunk_key", 1, "TYPE_UINT64", _OPT, ""),
        ("sequence_range", 2, "TYPE_MESSAGE", _OPT, _R + "SequenceRange"),
        ("deprecated_data", 3, "TYPE_MESSAGE", _REP, ".tensorflow.TensorProto"),
        ("delta_encoded", 4, "TYPE_BOOL", _OPT, ""),
        ("data", 5, "TYPE_MESSAGE", _OPT, _R + "ChunkData.Data"),
        ("data_tensors_len", 6, "TYPE_INT32", _OPT, ""),
        ("data_uncompressed_size", 7, "TYPE_INT64", _OPT, ""),
    ],
    "ChunkData.Data": [("tensors", 1, "TYPE_MESSAGE", _REP, ".tensorflow.TensorProto")],
    "FlatTrajectory": [("columns", 1, "TYPE_MESSAGE", _REP, _R + "FlatTrajectory.Column")],
    "FlatTrajectory.ChunkSlice": [
        ("chunk_key", 1, "TYPE_UINT64", _OPT, ""),
        ("offset", 2, "TYPE_INT32", _OPT, ""),
        ("length", 3, "TYPE_INT32", _OPT, ""),
        ("index", 4, "TYPE_INT32", _OPT, ""),
    ],
    "FlatTrajectory.Column": [
        ("chunk_slices", 1, "TYPE_MESSAGE", _REP, _R + "FlatTrajectory.ChunkSlice"),
        ("squeeze", 2, "TYPE_BOOL", _OPT, ""),
    ],
    "PrioritizedItem": [
        ("key", 1, "TYPE_UINT64", _OPT, ""),
        ("table", 2, "TYPE_STRING", _OPT, ""),
        ("deprecated_chunk_keys", 3, "TYPE_UINT64", _REP, ""),
        ("priority", 5, "TYPE_DOUBLE", _OPT, ""),
        ("times_sampled", 6, "TYPE_INT32", _OPT, ""),
        ("inserted_at", 7, "TYPE_MESSAGE", _OPT, ".google.protobuf.Timestamp"),
        ("flat_trajectory", 8, "TYPE_MESSAGE", _OPT, _R + "FlatTrajectory"),
    ],
}

# message -> (oneof name, its fields)
_ONEOFS = {
    "StructuredValue": ("kind", {f[0] for f in _TENSOR_FILE["StructuredValue"]}),
    "KeyDistributionOptions": ("distribution", {"fifo", "uniform", "prioritized", "heap", "lifo"}),
}


def _file_proto(
    name: str,
    package: str,
    dependencies: Sequence[str],
    messages_: dict[str, list[_Field]],
    enums: dict[str, list[tuple[str, int]]],
) -> Any:
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")
    fd.dependency.extend(dependencies)
    for enum_name, values in enums.items():
        enum = fd.enum_type.add(name=enum_name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    by_name: dict[str, Any] = {}
    for full in messages_:  # parents come before their nested types in the dicts above
        parent, _, leaf = full.rpartition(".")
        container = by_name[parent].nested_type if parent else fd.message_type
        by_name[full] = container.add(name=leaf)
    field_type = descriptor_pb2.FieldDescriptorProto.Type
    field_label = descriptor_pb2.FieldDescriptorProto.Label
    for full, fields in messages_.items():
        message = by_name[full]
        if full.endswith("Entry"):
            message.options.map_entry = True
        oneof = _ONEOFS.get(full)
        if oneof is not None:
            message.oneof_decl.add(name=oneof[0])
        for field_name, number, type_, label, type_name in fields:
            field = message.field.add(
                name=field_name,
                number=number,
                type=field_type.Value(type_),
                label=field_label.Value(label),
            )
            if type_name:
                field.type_name = type_name
            if oneof is not None and field_name in oneof[1]:
                field.oneof_index = 0
    return fd


@functools.cache
def messages() -> dict[str, Any]:
    """The message classes, keyed by short name (``"ChunkData"``, ``"TensorProto"``, ...).

    Raises:
        MissingExtraError: the ``protobuf`` package is not installed (the message says
            ``pip install "recollect[reverb]"``).
    """
    try:
        from google.protobuf import descriptor_pool, message_factory
    except ImportError as err:
        raise missing_extra(err, "reading Reverb checkpoints (recollect.state.reverb)") from err

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_proto("google/protobuf/timestamp.proto", "google.protobuf", [], _TIMESTAMP, {}))
    pool.Add(
        _file_proto(
            "recollect/reverb_tensorflow.proto",
            "tensorflow",
            [],
            _TENSOR_FILE,
            {"DataType": _DATA_TYPES},
        )
    )
    pool.Add(
        _file_proto(
            "recollect/reverb_checkpoint.proto",
            "deepmind.reverb",
            ["google/protobuf/timestamp.proto", "recollect/reverb_tensorflow.proto"],
            _REVERB_FILE,
            {},
        )
    )
    out: dict[str, Any] = {}
    for package, names in (("tensorflow", _TENSOR_FILE), ("deepmind.reverb", _REVERB_FILE)):
        for name in names:
            descriptor = pool.FindMessageTypeByName(f"{package}.{name}")
            out[name] = message_factory.GetMessageClass(descriptor)
    return out
