"""``recollect export`` / ``recollect import``: buffers to and from offline RL datasets.

``recollect export DIR/BUFFER --to minari --dataset-id cartpole/random-v0``
writes the checkpoint's complete episodes as a Minari dataset (``--to rlds
--output DIR`` as an RLDS/TFDS dataset). ``recollect import --from minari ID
--checkpoint-dir D --buffer-name N`` loads a dataset into a new buffer and
checkpoints it to ``D/N`` (as ``recollect populate`` does); ``--from reverb DIR``
imports the episodes of a dm-reverb checkpoint's table (``--table NAME``);
``recollect populate --from-dataset ID`` starts from one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from recollect.cli.group import count_option, main
from recollect.errors import RecollectError

__all__ = ["export_buffer", "import_dataset", "seed_from_dataset"]

_FORMATS = click.Choice(["minari", "rlds"])
_IMPORT_FORMATS = click.Choice(["minari", "rlds", "reverb"])


def _load_dataset(fmt: str, source: str, download: bool | None = False, **kwargs: Any) -> Any:
    """A new buffer with the episodes of Minari dataset ``source`` or RLDS directory ``source``.

    Every failure is one ``click.ClickException`` (an ``Error:`` line, exit 1).
    ``download`` is None where the command has no ``--download`` option (a missing
    Minari id then names only ``minari download``).
    """
    from recollect import datasets

    if fmt == "reverb":
        from recollect.datasets.reverb import from_reverb

        try:
            return from_reverb(source, **kwargs)
        except RecollectError as err:
            raise click.ClickException(str(err)) from err
    kwargs.pop("table", None)
    if fmt == "rlds" and not Path(source, "dataset_info.json").is_file():
        raise click.ClickException(
            f"{source!r} is not an RLDS/TFDS dataset directory (it has no dataset_info.json); "
            "pass the directory that `recollect export --to rlds --output DIR` or TFDS wrote, "
            "e.g. ~/tensorflow_datasets/NAME/CONFIG/VERSION."
        )
    try:
        if fmt == "minari":
            return datasets.from_minari(source, download=bool(download), **kwargs)
        import tensorflow_datasets as tfds

        episodes = tfds.builder_from_directory(source).as_dataset(split="train")
        return datasets.from_rlds(episodes, **kwargs)
    except RecollectError as err:
        raise click.ClickException(str(err)) from err
    except (FileNotFoundError, ValueError) as err:
        if fmt == "minari" and not download and "not found locally" in str(err):
            raise click.ClickException(
                f"Minari dataset {source!r} is not in the local Minari datasets folder "
                "(MINARI_DATASETS_PATH, default ~/.minari/datasets). "
                + (
                    "Run"
                    if download is None
                    else "Add --download to fetch it from Minari's remote hub, or run"
                )
                + f" `minari download {source}` first."
            ) from None
        raise click.ClickException(f"cannot load {fmt} dataset {source!r}: {err}") from err
    except ImportError as err:
        raise click.ClickException(f"cannot load {fmt} dataset {source!r}: {err}") from err
    except Exception as err:  # a library's own error (network, TFDS metadata): one line
        raise click.ClickException(
            f"cannot load {fmt} dataset {source!r}: {type(err).__name__}: {err}"
        ) from err


def seed_from_dataset(
    dataset_id: str, spec: Any, capacity: int, num_envs: int, seed: int, path: Path
) -> int:
    """Checkpoints a buffer holding Minari dataset ``dataset_id`` to ``path``; returns its steps.

    Used by ``recollect populate --from-dataset``: ``spec`` is the env's RLDS
    spec, so collection continues in the same buffer.
    """
    buf = _load_dataset(
        "minari",
        dataset_id,
        download=None,
        capacity=capacity,
        num_envs=num_envs,
        data_spec=spec,
        rng=seed,
    )
    buf.save(path)
    return buf.num_frames()


@main.command("export")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--to", "fmt", type=_FORMATS, required=True, help="dataset format.")
@click.option("--dataset-id", help="Minari dataset id, e.g. cartpole/random-v0 (--to minari).")
@click.option("--env", "env_id", help="gymnasium env id the data came from (--to minari).")
@click.option("--output", type=click.Path(file_okay=False), help="new directory (--to rlds).")
def export_buffer(
    path: str, fmt: str, dataset_id: str | None, env_id: str | None, output: str | None
) -> None:
    """Write the complete episodes of checkpoint PATH as a Minari or RLDS dataset."""
    from recollect import datasets, load_buffer

    if fmt == "minari" and not dataset_id:
        raise click.UsageError("--to minari needs --dataset-id.")
    if fmt == "rlds" and not output:
        raise click.UsageError("--to rlds needs --output.")
    out: datasets.MinariExport | datasets.RldsExport
    try:
        buf = load_buffer(path)
        if fmt == "minari":
            assert dataset_id  # checked above
            out = datasets.to_minari(buf, dataset_id, env=env_id)
            where = f"Minari dataset {dataset_id!r}"
        else:
            assert output  # checked above
            rlds = datasets.to_rlds(buf, output)
            out, where = rlds, f"RLDS dataset {rlds.path}"
    except RecollectError as err:
        raise click.ClickException(str(err)) from err
    except (ValueError, OSError) as err:  # Minari: dataset id taken; a directory not writable
        raise click.ClickException(f"cannot write {fmt} dataset: {err}") from err
    click.echo(
        f"exported {out.episodes} episodes ({out.steps} steps) to {where}; "
        f"{out.skipped} incomplete episode parts skipped"
    )


@main.command("import")
@click.option("--from", "fmt", type=_IMPORT_FORMATS, required=True, help="dataset format.")
@click.argument("source")
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False),
    required=True,
    help="directory that receives the buffer checkpoint DIR/BUFFER_NAME.",
)
@click.option("--buffer-name", default="replay-buffer", show_default=True, help="checkpoint name.")
@count_option("--capacity", None, "default: the dataset's steps.")
@count_option("--num-envs", 1, "env rows; episodes are spread over them.")
@click.option("--seed", type=int, default=0, show_default=True, help="the buffer's sampling seed.")
@click.option(
    "--download",
    is_flag=True,
    help="--from minari: fetch a dataset missing locally from Minari's remote hub.",
)
@click.option("--table", help="--from reverb: the table to import (needed with several).")
def import_dataset(
    fmt: str,
    source: str,
    checkpoint_dir: str,
    buffer_name: str,
    capacity: int | None,
    num_envs: int,
    seed: int,
    download: bool,
    table: str | None,
) -> None:
    """Load SOURCE (a Minari dataset id, an RLDS/TFDS directory, or a Reverb checkpoint
    directory) into a new buffer.

    The buffer is checkpointed to CHECKPOINT_DIR/BUFFER_NAME.
    """
    if download and fmt != "minari":
        raise click.UsageError("--download works with --from minari only.")
    if table is not None and fmt != "reverb":
        raise click.UsageError("--table works with --from reverb only.")
    buf = _load_dataset(
        fmt,
        source,
        download=download,
        capacity=capacity,
        num_envs=num_envs,
        rng=seed,
        table=table,
    )
    path = Path(checkpoint_dir) / buffer_name
    try:
        buf.save(path)
    except RecollectError as err:
        raise click.ClickException(str(err)) from err
    click.echo(
        f"imported {source} into {path}: {buf.num_frames()} steps "
        f"(capacity {buf.capacity}, {buf.num_envs} rows)"
    )
