"""Writing commands over hostile layouts: a directory named like each kind of file kltool reads or writes, a
FIFO, an unreadable file, a dangling symlink (to a path inside the log dir or out of it). For every writing
command (verify --repair, rebuild-index, retention, compact, append, create, restore) the dry run predicts the
real run: a real run that refuses is a dry run that refuses with the same line and exit code, and the other
way round; no exit 70 or traceback; nothing outside the log dir changes; a refused run leaves no trace (no
backup run directory, no temp file, the log dir as it was).

Tests run as root here, which reads everything: the unreadable cases run kltool as ``nobody`` (setpriv) on a
tree that user may traverse, as tests/test_unreadable.py does. FIFO and unreadable cases run kltool in a
subprocess with a timeout (a FIFO opened the plain way blocks); the rest in process."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .conftest import FIXTURES, ORACLE, run_kltool
from .test_unreadable import as_nobody_cmd

KLTOOL = str(Path(sys.executable).with_name("kltool"))
SEG = "{:020d}".format

# the file of each kind a command may read, write, rename or delete (t-0: segments 0, 400, 800, no indexes;
# u-0: one damaged segment; root checkpoints)
TARGETS = {
    "log": f"t-0/{SEG(400)}.log",
    "active_log": f"t-0/{SEG(800)}.log",
    "index": f"t-0/{SEG(800)}.index",
    "timeindex": f"t-0/{SEG(800)}.timeindex",
    "txnindex": f"t-0/{SEG(0)}.txnindex",
    "damaged_index": f"u-0/{SEG(0)}.index",
    "snapshot": f"t-0/{SEG(800)}.snapshot",
    "leader_epoch": "t-0/leader-epoch-checkpoint",
    "partition_metadata": "t-0/partition.metadata",
    "deleted": f"t-0/{SEG(0)}.log.deleted",
    "cleaned": f"t-0/{SEG(400)}.log.cleaned",
    "swap": f"t-0/{SEG(400)}.log.swap",
    "index_swap": f"t-0/{SEG(800)}.index.swap",
    "root_checkpoint": "log-start-offset-checkpoint",
    "recovery_checkpoint": "recovery-point-offset-checkpoint",
    "cleaner_checkpoint": "cleaner-offset-checkpoint",
    "new_partition": "n-0",
    "backup_dir": "../ld.kltool-backup",  # the default backup root beside the log dir
}
STYLES = ["dir", "fifo", "unreadable", "dangling_inside", "dangling_outside"]

COMMANDS = {
    "repair": ["verify", "--repair"],
    "repair-like-broker": ["verify", "--repair", "--like-broker"],
    "rebuild-index": ["rebuild-index"],
    "rebuild-index-force": ["rebuild-index", "--force"],
    "retention": ["retention", "--retention-ms", "1"],
    "retention-no-backup": ["retention", "--retention-ms", "1", "--no-backup"],
    "compact": ["compact", "--config", "cleanup.policy=compact", "--now", "2030-01-01T00:00:00Z"],
    "compact-no-backup": ["compact", "--no-backup", "--config", "cleanup.policy=compact", "--now",
                          "2030-01-01T00:00:00Z"],
    "append": ["append", "{ld}", "t", "-p", "0", "--key", "k", "--value", "v"],
    "create": ["create", "{ld}", "n", "--partitions", "1"],
    "restore": ["restore", "{manifest}"],
}
SUBPROCESS_STYLES = {"fifo", "unreadable"}


def _tree(root: Path) -> dict[str, object]:
    """Every path under ``root`` without following links or opening anything but regular files: files with
    their bytes (or their size and mtime when the test cannot read them), the rest by kind."""
    out: dict[str, object] = {}
    if not os.path.lexists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISREG(st.st_mode):
                try:
                    out[rel] = Path(p).read_bytes()
                except OSError:
                    out[rel] = ("unreadable", st.st_size, st.st_mtime_ns)
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            else:
                out[rel] = ("dir" if stat.S_ISDIR(st.st_mode) else "other", stat.S_IFMT(st.st_mode))
    return out


def _base(tmp: Path) -> Path:
    ld = tmp / "ld"
    shutil.copytree(ORACLE / "v2-multi-segment-0", ld / "t-0")
    shutil.copytree(ORACLE / "damaged-v2-crc-0", ld / "u-0")
    for p in (ld / "t-0" / "expected.jsonl", ld / "u-0" / "expected.jsonl"):
        p.unlink()
    shutil.copy(FIXTURES / "sample-logdir/lsx1-0/partition.metadata", ld / "t-0" / "partition.metadata")
    (ld / "t-0" / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (ld / "meta.properties").write_text("version=1\ncluster.id=x\nnode.id=1\n")
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint",
                 "cleaner-offset-checkpoint"):
        (ld / name).write_text("0\n1\nt 0 0\n")
    (tmp / "elsewhere").mkdir()
    (tmp / "elsewhere" / "keep").write_bytes(b"outside")
    return ld


def _hostile(tmp: Path, ld: Path, target: str, style: str) -> None:
    p = ld / target
    if os.path.lexists(p) and style != "unreadable":
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    if style == "dir":
        p.mkdir()
        (p / "inside").write_bytes(b"x" * 10)
    elif style == "fifo":
        os.mkfifo(p)
    elif style == "unreadable":
        if not p.exists():
            p.mkdir() if target == TARGETS["new_partition"] else p.write_bytes(b"\0" * 12)
        p.chmod(0)
    elif style == "dangling_inside":
        os.symlink(ld / "t-0" / "no-such-file", p)
    elif style == "dangling_outside":
        os.symlink(tmp / "elsewhere" / "no-such-file", p)


def _world() -> Path:
    d = Path(tempfile.mkdtemp(prefix="kltool-hostile-", dir="/tmp"))
    d.chmod(0o755)
    return d


def _open_up(root: Path) -> None:
    """Let ``nobody`` read and write the tree (the unreadable file is made so after this); not root: nothing
    to do (chmod 000 holds for the user the tests run as)."""
    if os.geteuid() != 0:
        return
    for p in [root, *root.rglob("*")]:
        if not p.is_symlink():
            os.chown(p, 65534, 65534)


def _run(args, as_nobody: bool, subprocess_: bool):
    if not subprocess_:
        r = run_kltool(*args)
        return r.code, r.out, r.err
    cmd = [KLTOOL, *map(str, args)]
    if as_nobody:
        cmd = as_nobody_cmd(cmd)
    env = dict(os.environ)
    env.pop("KLTOOL_DEBUG", None)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        return "timeout", "", ""
    return r.returncode, r.stdout, r.stderr


def _error_lines(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.startswith("kltool: error:")]


def _args(name: str, ld: Path, manifest: Path | None) -> list[str]:
    args = [a.format(ld=ld, manifest=manifest) for a in COMMANDS[name]]
    if "{ld}" not in COMMANDS[name] and "{manifest}" not in COMMANDS[name]:
        args.append(str(ld))
    return args


def _dry(args: list[str]) -> list[str]:
    return [*args[:1], *(["--repair"] if args[:2] == ["verify", "--repair"] else []), "--dry-run",
            *args[2 if args[:2] == ["verify", "--repair"] else 1:]]


def check(target: str, style: str, name: str) -> list[str]:
    """The discrepancies of one command over one hostile layout (an empty list: none)."""
    if target == "backup_dir" and name == "restore":  # the manifest lives there
        return []
    tmp = _world()
    try:
        ld = _base(tmp)
        manifest = None
        if name == "restore":  # a repair's backup, then the layout turns hostile under it
            r = run_kltool("verify", "--repair", ld)
            assert r.code == 0, r
            manifest = next((tmp / "ld.kltool-backup").glob("*/manifest.json"))
        nobody = style == "unreadable"
        sub = style in SUBPROCESS_STYLES
        if nobody:
            _open_up(tmp)
        _hostile(tmp, ld, TARGETS[target], style)
        args = _args(name, ld, manifest)
        before_out, before_ld = _tree(tmp / "elsewhere"), _tree(ld)
        before_bk = _tree(tmp / "ld.kltool-backup")
        dcode, _dout, derr = _run(_dry(args), nobody, sub)
        bad = []
        if _tree(ld) != before_ld or _tree(tmp / "ld.kltool-backup") != before_bk:
            bad.append("the dry run changed something")
        code, _out, err = _run(args, nobody, sub)
        for what, c, e in (("dry run", dcode, derr), ("run", code, err)):
            if c == "timeout":
                bad.append(f"{what} blocked")
            if c == 70 or "Traceback" in e:
                bad.append(f"{what}: exit {c} {e.strip()[-300:]}")
        refused, drefused = code in (2, 3), dcode in (2, 3)
        if refused != drefused or (refused and (code != dcode or _error_lines(err) != _error_lines(derr))):
            bad.append(f"dry run {dcode} {_error_lines(derr)} but run {code} {_error_lines(err)}")
        if _tree(tmp / "elsewhere") != before_out:
            bad.append("changed outside the log dir")
        if refused:
            if _tree(tmp / "ld.kltool-backup") != before_bk:
                bad.append(f"a refused run left {sorted(set(_tree(tmp / 'ld.kltool-backup')) - set(before_bk))}")
            if _tree(ld) != before_ld:
                now = _tree(ld)
                bad.append(f"a refused run changed the log dir: {sorted(k for k in now.keys() | before_ld.keys() if now.get(k) != before_ld.get(k))}")
        return bad
    finally:
        for p in [tmp, *tmp.rglob("*")]:
            if not p.is_symlink():
                os.chmod(p, 0o755)
        shutil.rmtree(tmp)


# the whole matrix is slow (each case runs every command twice); these few run in the fast loop
FAST = {("index", "dir"), ("active_log", "dir"), ("root_checkpoint", "dangling_outside"), ("deleted", "dir")}
CASES = [pytest.param(t, s, marks=[] if (t, s) in FAST else [pytest.mark.slow], id=f"{t}-{s}")
         for t in TARGETS for s in STYLES]


@pytest.mark.parametrize(("target", "style"), CASES)
def test_the_dry_run_predicts_the_run_over_a_hostile_layout(target, style):
    bad = {name: b for name in COMMANDS if (b := check(target, style, name))}
    assert not bad, bad


@pytest.mark.parametrize("command", [["rebuild-index"], ["rebuild-index", "--force"], ["verify", "--repair"]])
def test_a_directory_named_like_an_index_is_refused_by_the_dry_run_too(kl, tmp_path, command):
    """The stop-18 adversary: the dry run planned to rebuild a ``.timeindex`` that is a directory, the real
    run refused it (exit 2) and left an empty run directory in the backup dir. Now both refuse with the same
    line, and the refused run leaves nothing behind (the backup root it would have made included)."""
    ld = tmp_path / "ld"
    shutil.copytree(ORACLE / "v2-multi-segment-0", ld / "t-0")
    (ld / "t-0" / "expected.jsonl").unlink()
    (ld / "t-0" / f"{SEG(0)}.timeindex").mkdir()
    before = _tree(ld)
    dry = kl(*command[:2], "--dry-run", *command[2:], ld) if command[0] == "verify" else \
        kl(*command, "--dry-run", ld)
    real = kl(*command, ld)
    assert dry.code == real.code == 2, (dry, real)
    line = f"kltool: error: {ld / 't-0' / (SEG(0) + '.timeindex')}: is a directory, not a regular file: not rebuild_index"
    assert dry.err.startswith(line) and dry.err == real.err and real.err.count("\n") == 1, (dry.err, real.err)
    assert _tree(ld) == before
    assert not (tmp_path / "ld.kltool-backup").exists()


def test_a_run_that_fails_before_its_manifest_leaves_no_run_directory(tmp_path):
    """What no check foresees (here a file the run was to have made is missing) still leaves no empty run
    directory, and no backup root the run made."""
    from kltool.errors import UnsafeOperation
    from kltool.storage.change.apply import apply_changes
    from kltool.storage.change.plan import Action, ChangeSet

    ld = tmp_path / "ld"
    shutil.copytree(ORACLE / "v2-multi-segment-0", ld / "t-0")
    acts = [Action("create", ld / "t-0" / f"{SEG(0)}.log.cleaned", "made while planning")]
    with pytest.raises(UnsafeOperation, match="missing"):
        apply_changes([ChangeSet(ld, acts)], "compact")
    assert not (tmp_path / "ld.kltool-backup").exists()
    (tmp_path / "bk").mkdir()
    with pytest.raises(UnsafeOperation, match="missing"):
        apply_changes([ChangeSet(ld, acts)], "compact", tmp_path / "bk")
    assert list((tmp_path / "bk").iterdir()) == []


@pytest.mark.parametrize("style", ["dir", "fifo", "symlink_outside"])
def test_compact_without_backup_checks_what_it_replaces_as_the_backup_path_does(kl, tmp_path, style):
    """``compact --no-backup`` made no confinement or file-kind check: a segment it replaced that was a symlink
    out of the log dir was renamed (and the file outside deleted), a directory or FIFO named like an index went
    its way unchecked. Now the dry run and the run refuse it with the same line as the backup path, and
    nothing changes, outside the log dir or in it."""
    ld = tmp_path / "ld"
    shutil.copytree(ORACLE / "v2-multi-segment-0", ld / "t-0")
    (ld / "t-0" / "expected.jsonl").unlink()
    (tmp_path / "elsewhere").mkdir()
    victim = ld / "t-0" / f"{SEG(0)}.index"
    if victim.exists():
        victim.unlink()
    if style == "dir":
        victim.mkdir()
    elif style == "fifo":
        os.mkfifo(victim)
    else:
        (tmp_path / "elsewhere" / "x.index").write_bytes(b"")
        os.symlink(tmp_path / "elsewhere" / "x.index", victim)
    args = ["--config", "cleanup.policy=compact", "--now", "2030-01-01T00:00:00Z", ld]
    before, outside = _tree(ld), _tree(tmp_path / "elsewhere")
    backed = kl("compact", "--dry-run", *args)
    dry = kl("compact", "--dry-run", "--no-backup", *args)
    real = kl("compact", "--no-backup", *args)
    assert backed.code in (2, 3), backed
    assert dry.code == real.code == backed.code, (backed, dry, real)
    assert _error_lines(dry.err) == _error_lines(real.err) == _error_lines(backed.err), (backed.err, dry.err, real.err)
    assert _tree(ld) == before and _tree(tmp_path / "elsewhere") == outside
