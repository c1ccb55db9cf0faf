"""kltool create: a topic's partition directories, offline (see kltool-create(1))."""

from __future__ import annotations

import click

from ..errors import UsageError


def _ranges(nums: list[int]) -> str:
    if not nums:
        return "none"
    return f"{nums[0]}" if len(nums) == 1 else f"{nums[0]}-{nums[-1]}"


@click.command("create")
@click.argument("logdir", type=click.Path(path_type=str, readable=False))
@click.argument("topic")
@click.option("--partitions", type=int,
              help="Number of partitions (larger than today's count adds partitions to an existing topic). Required.")
@click.option("-p", "partitions_short", type=int, hidden=True)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="A topic setting kltool uses (repeatable): segment.bytes, segment.ms, index.interval.bytes, "
                   "segment.index.bytes, max.message.bytes, message.timestamp.type, retention.ms, retention.bytes, "
                   "cleanup.policy, compression.type, compression.{gzip,lz4,zstd}.level, max.compaction.lag.ms. "
                   "Stored in LOGDIR/kltool-topics.json.")
@click.option("--if-not-exists", is_flag=True,
              help="An existing topic is not an error (its --config values are still stored).")
@click.option("--topic-id", metavar="UUID", help="Use this topic id (22-char base64url) instead of a random one.")
@click.option("--dry-run", is_flag=True, help="Print what would be created, change nothing.")
@click.option("--force", is_flag=True,
              help="Create partition directories in a KRaft log dir anyway (the broker will rename them -stray "
                   "and not serve them; for offline work on a copy only).")
@click.pass_obj
def command(out, logdir, topic, partitions, partitions_short, configs, if_not_exists, topic_id, dry_run, force):
    """Create TOPIC in LOGDIR: partition directories TOPIC-0 .. TOPIC-(N-1), each with an empty first
    segment and a partition.metadata holding the topic id, as a broker leaves a new partition.

    LOGDIR is made if it does not exist. The broker's .lock is taken (exit 3 while a broker runs).
    Kafka's topic-name rules apply; a name colliding with an existing topic once '.' and '_' are
    unified is refused.

    A KRaft log dir (meta.properties version=1, or a __cluster_metadata-0 directory) is refused
    (exit 3): the broker's metadata would not know the topic, and Kafka 4.x renames such a directory
    -stray and serves nothing of it. There, create the topic through the broker, stop the broker,
    then `kltool append` offline. ZooKeeper-era log dirs (meta.properties version=0) and new or
    bare directories are created as before.

    \b
    Examples:
      kltool create /tmp/scratch orders --partitions 3 --config segment.bytes=1048576
      # a KRaft broker's log dir: through the broker, then offline
      kafka-topics.sh --bootstrap-server HOST:9092 --create --topic orders --partitions 3
      # stop the broker, then:
      kltool append /var/lib/kafka/data orders --input records.jsonl
    """
    from ..storage.topic_config import CONFIG_FILE_NAME, parse_config_items
    from ..storage.write.create import create_topic

    if partitions_short is not None:
        # -p selects partitions in every other command; the old count form keeps working, with a hint.
        if partitions is not None:
            raise UsageError("give --partitions once (-p is its old short form)")
        out.warn("create -p N is now --partitions N (-p selects partitions in the other commands)")
        partitions = partitions_short
    if partitions is None:
        raise UsageError("Missing option '--partitions' (the number of partitions).")
    config = parse_config_items(configs)
    r = create_topic(logdir, topic, partitions, config=config, if_not_exists=if_not_exists, topic_id=topic_id,
                     dry_run=dry_run, force=force)
    for w in r.warnings:
        out.warn(w)
    new_parts = list(range(r.partitions_before, r.partitions_before + len(r.created)))
    applied = not dry_run
    if out.json_mode:
        for p, d in zip(new_parts, r.created, strict=True):
            out.emit({"type": "action", "op": "create_partition", "file": str(d), "topic": r.topic, "partition": p,
                      "topic_id": r.topic_id, "applied": applied})
        if r.config_changed:
            out.emit({"type": "action", "op": "write_config", "file": str(r.logdir / CONFIG_FILE_NAME),
                      "topic": r.topic, "config": r.config, "applied": applied})
        out.emit({"type": "summary", "topic": r.topic, "topic_id": r.topic_id, "existed": r.existed,
                  "partitions_before": r.partitions_before, "partitions": r.partitions,
                  "created": len(r.created), "config": r.config, "dry_run": dry_run})
    else:
        verb = "would create" if dry_run else "created"
        if r.created:
            what = "topic" if not r.existed else f"{len(r.created)} partitions of topic"
            out.line(f"{verb} {what} {r.topic} (topic id {r.topic_id}): partitions {_ranges(new_parts)} "
                     f"in {r.logdir}")
        else:
            out.line(f"topic {r.topic} already exists with {r.partitions_before} partitions (topic id {r.topic_id})")
        if r.config_changed:
            settings = ", ".join(f"{k}={v}" for k, v in sorted(r.config.items()))
            out.line(f"{'would store' if dry_run else 'stored'} settings in {r.logdir / CONFIG_FILE_NAME}: {settings}")
    work = bool(r.created) or r.config_changed
    return 1 if dry_run and work else 0
