"""kltool tiered-fetch: segments tiered by Aiven's tiered-storage plugin, reassembled into a log dir."""

from __future__ import annotations

import click


@click.command("tiered-fetch")
@click.argument("source", type=str)
@click.option("--output", "-o", "output", required=True, type=click.Path(path_type=str, file_okay=False),
              help="The directory to write <topic>-<partition>/<offset>.log (and indexes) into.")
@click.option("--topic", metavar="GLOB", help="Only topics matching this glob.")
@click.option("--partition", "-p", "partition_spec", metavar="N[,N..]", help="Only these partition numbers.")
@click.option("--private-key", "private_keys", multiple=True, metavar="[ID=]FILE",
              help="PEM file of an RSA private key of the plugin's key ring ([ID=]FILE; repeatable): "
                   "needed for encrypted segments.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="Object-store option for an s3:// (gs://, abfs://) SOURCE, as spark's storage.* options "
                   "(endpoint_override, access_key, secret_key, region ...).")
@click.pass_obj
def command(out, source, output, topic, partition_spec, private_keys, storage_options):
    """Reassemble the segments Aiven's tiered-storage-for-apache-kafka plugin wrote under SOURCE (a local
    directory or an object-store URI: <prefix><topic>-<topic id>/<partition>/<offset>-<id>.{log,indexes,
    rsm-manifest}) into OUTPUT/<topic>-<partition>/<offset>.{log,index,timeindex,txnindex,snapshot}, the
    broker's own bytes: chunks are fetched one ranged read at a time, decrypted (AES-GCM, data key unwrapped
    with --private-key) and decompressed (zstd). kltool info, dump and verify then read OUTPUT, alone or
    with the log dir (`kltool info LOGDIR OUTPUT`). Existing files in OUTPUT are never overwritten."""
    import fnmatch
    from pathlib import Path

    from ..errors import UsageError
    from ..storage.aiven import find_segments, write_segment
    from .common import human_bytes, parse_partitions

    opts = {}
    for kv in storage_options:
        k, sep, v = kv.partition("=")
        if not sep:
            raise UsageError(f"--storage-option {kv!r}: KEY=VALUE expected")
        opts[k] = v
    keys: dict[str, bytes] = {}
    for i, spec in enumerate(private_keys):
        kid, sep, f = spec.partition("=")
        kid, f = (kid, f) if sep and Path(f).is_file() else (f"#{i}", spec)
        try:
            keys[kid] = Path(f).read_bytes()
        except OSError as e:
            raise UsageError(f"--private-key {f}: {e.strerror}") from None
    parts = parse_partitions(partition_spec) if partition_spec else None
    refs = [r for r in find_segments(source, opts)
            if (topic is None or fnmatch.fnmatchcase(r.topic, topic)) and (parts is None or r.partition in parts)]
    if not refs:
        raise UsageError(f"{source}: no tiered segment (<offset>-<id>.rsm-manifest) "
                         + ("selected" if topic or parts else "found"))
    total = 0
    for ref in refs:
        seg = ref.open(_keys_for(keys))
        written = write_segment(seg, ref, output)
        total += seg.size
        if out.json_mode:
            out.emit({"type": "segment", "topic": ref.topic, "topic_id": ref.topic_id, "partition": ref.partition,
                      "base_offset": ref.base_offset, "segment_id": ref.segment_id, "bytes": seg.size,
                      "chunks": len(seg.chunks), "compressed": seg.compression, "encrypted": seg.encrypted,
                      "files": [str(p) for p in written]})
        else:
            out.line(f"{written[0]}: {human_bytes(seg.size)} from {len(seg.chunks)} chunk(s)"
                     + (", zstd" if seg.compression else "") + (", AES-GCM" if seg.encrypted else ""))
    if not out.json_mode:
        out.line(f"tiered-fetch: {len(refs)} segment(s), {human_bytes(total)} written to {output}")
    return 0


def _keys_for(keys: dict[str, bytes]):
    """Named keys (ID=FILE) by id; unnamed ones are tried in turn."""
    return keys if any(not k.startswith("#") for k in keys) else list(keys.values())
