"""Every bad input over every command: exit 2, one stderr line naming the problem, no traceback, no file touched.

Table-driven and in-process (`scalestudy.cli.main(argv)`), so ~200 cases take seconds. The cases run one after the
other in one copy of a workspace of bad files (malformed YAML, corrupt/foreign/column-less stores, an existing file
where a directory is wanted, immutable directories, ...), each with its own files added; the workspace is
snapshotted before and after (path, size, mode, content hash) and must be unchanged, and a case that changed it
leaves the next case a fresh copy. Starting any process (subprocess, torchrun worker, fork) fails the case:
validation must happen before anything starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from scalestudy.cli import main

GOOD_SPEC = """\
name: tiny
model: t5-tiny
engine: ddp
nproc: 1
micro_batch: 2
global_batch: 2
seq_len: 32
target_len: 8
steps: 4
"""
SEARCH_SPEC = GOOD_SPEC + """\
search:
  trials_per_model: 2
  budget_tokens: 640
  space:
    lr: {low: 1.0e-4, high: 1.0e-2, log: true}
"""
MALFORMED = "name: x\nmodel: [t5-tiny, t5-mini\nsteps: 3\n"


class ProcessStarted(BaseException):
    """Raised instead of starting a process: bad input must be refused before anything starts."""


def _refuse(*args, **kwargs):
    raise ProcessStarted("a process was started before the input was validated")


def _store(path: Path, trials: int = 2) -> None:
    from scalestudy.study.store import Store

    with Store(path) as store:
        store.set_meta("name", "fixture")
        for i in range(trials):
            store.record_trial({"trial_id": f"t{i}", "status": "OK" if i else "FAILED", "label": f"trial {i}",
                                "model": f"m{i % 4}", "params": 1_000_000 * (i % 4 + 1), "tokens": 1e6 * (i // 4 + 1),
                                "flops": 6e12 * (i % 4 + 1) * (i // 4 + 1), "loss": 5.0 / (1 + 0.1 * i), "started_at": float(i), "error_tail": "boom" if not i else None},
                               [{"step": s, "loss": 6.0 - s} for s in range(1, 4)])


def _build_workspace(root: Path) -> None:
    """The files every case may point at (built once, copied per case)."""
    (root / "good.yaml").write_text(GOOD_SPEC)
    (root / "search.yaml").write_text(SEARCH_SPEC)
    (root / "malformed.yaml").write_text(MALFORMED)
    (root / "empty.yaml").write_text("")
    (root / "list.yaml").write_text("- 1\n- 2\n")
    (root / "scalar.yaml").write_text("42\n")
    (root / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (root / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (root / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))  # a corpus that is not UTF-8
    (root / "lockdir" / ".runner.lock").mkdir(parents=True)  # a directory where the runner's lock file goes
    from importlib import resources

    (root / "profile.yaml").write_text((resources.files("scalestudy.specs") / "hardware" / "local-cpu.yaml")
                                       .read_text(encoding="utf-8"))
    (root / "afile.txt").write_text("not a directory\n")
    (root / "empty.txt").write_text("")
    (root / "corpus.txt").write_text("In the beginning God created the heaven and the earth.\n" * 50)
    (root / "corpus.xyz").write_text("some text\n" * 50)
    (root / "garbage-tokenizer.json").write_text("{not json")
    (root / "runs.csv").write_text("model,params,tokens,flops,loss\n" + "".join(
        f"m{i % 3},{1e6 * (i % 3 + 1)},{1e8 * (i // 3 + 1)},{6e14 * (i % 3 + 1) * (i // 3 + 1)},{4 - 0.1 * i}\n"
        for i in range(6)))
    (root / "nocols.csv").write_text("a,b\n1,2\n")
    (root / "empty.csv").write_text("")
    (root / "cfg-unknown.yaml").write_text("model: t5-tiny\nbogus_option: 3\n")
    (root / "cfg-badtype.yaml").write_text("steps: many\n")
    (root / "spec-unknown.yaml").write_text(GOOD_SPEC + "colour: blue\n")
    (root / "spec-badmodel.yaml").write_text(GOOD_SPEC.replace("t5-tiny", "t5-gigantic"))
    (root / "spec-steps0.yaml").write_text(GOOD_SPEC.replace("steps: 4", "steps: 0"))
    (root / "spec-lrnan.yaml").write_text(GOOD_SPEC + "lr: .nan\n")
    (root / "spec-conc0.yaml").write_text(GOOD_SPEC + "concurrency: 0\n")
    (root / "spec-executor.yaml").write_text(GOOD_SPEC + "executor: mars\n")
    (root / "spec-nogrid.yaml").write_text(GOOD_SPEC + "strategies:\n  - {engine: fsdp, zero: 1}\n")
    (root / "spec-warmup.yaml").write_text(GOOD_SPEC + "warmup: 5\n")
    (root / "spec-data-missing.yaml").write_text(GOOD_SPEC + "data: nowhere.txt\n")
    (root / "search-noblock.yaml").write_text(GOOD_SPEC)
    # clusters mixing device types (`groups:`), each wrong in one way
    for name, text in MIXED_CLUSTERS.items():
        (root / f"mixed-{name}.yaml").write_text(text)
    a100 = (resources.files("scalestudy.specs") / "hardware" / "a100-40gb.yaml").read_text(encoding="utf-8")
    for name, (key, value) in DEVICE_EDITS.items():  # a device file wrong in one field
        (root / f"dev-{name}.yaml").write_text(re.sub(rf"^{key}:.*$", f"{key}: {value}", a100, flags=re.M)
                                               if f"\n{key}:" in a100 else a100 + f"{key}: {value}\n")
    (root / "search-badspace.yaml").write_text(GOOD_SPEC + "search:\n  space: {colour: [red]}\n")

    study = root / "study"
    study.mkdir()
    _store(study / "study.sqlite", trials=40)
    raw = (study / "study.sqlite").read_bytes()
    assert len(raw) > 8 * 4096, len(raw)
    for name, content in {
        "zero": b"",
        "garbage": os.urandom(3 * 4096),
        "truncated": raw[: 2 * 4096 + 100],
        "midcorrupt": raw[: 3 * 4096] + os.urandom(4096) + raw[4 * 4096:],
        "textfile": b"hello, I am not a database\n" * 10,
    }.items():
        (root / name).mkdir()
        (root / name / "study.sqlite").write_bytes(content)
    for name, blocker in (("study-plots-file", "plots"), ("study-report-dir", "report.md")):  # a report output
        shutil.copytree(study, root / name)                                                  # name taken
        (root / name / blocker).mkdir() if blocker.endswith(".md") else (root / name / blocker).write_text("x\n")
    (root / "foreign").mkdir()
    with contextlib.closing(sqlite3.connect(root / "foreign" / "study.sqlite")) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
        conn.execute("INSERT INTO photos(path) VALUES ('holiday.jpg')")
        conn.commit()
    (root / "columnless").mkdir()
    with contextlib.closing(sqlite3.connect(root / "columnless" / "study.sqlite")) as conn:
        conn.execute("CREATE TABLE trials (trial_id TEXT PRIMARY KEY, status TEXT)")
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO trials VALUES ('a', 'OK')")
        conn.commit()
    (root / "badmeta").mkdir()  # a store whose meta rows another program wrote (not JSON)
    shutil.copy(study / "study.sqlite", root / "badmeta" / "study.sqlite")
    with contextlib.closing(sqlite3.connect(root / "badmeta" / "study.sqlite")) as conn:
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('name', 'fixture, not JSON')")
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('trial_ids', '[unclosed')")
        conn.commit()
    (root / "nostore").mkdir()
    (root / "export-dir.csv").mkdir()
    (root / "plotdir").mkdir()
    # a finished-looking run directory (train refuses to overwrite it without --resume)
    (root / "run").mkdir()
    (root / "run" / "metrics.jsonl").write_text('{"step": 1, "loss": 5.0}\n')
    (root / "run" / "summary.json").write_text('{"status": "ok"}\n')
    (root / "newdir-parent").mkdir()
    (root / "ranfile").mkdir()  # a file where a run makes its checkpoints folder
    (root / "ranfile" / "checkpoints").write_text("not a folder\n")
    (root / "model-vocab-200.yaml").write_text("family: t5\nd_model: 64\nlayers: 2\nheads: 2\nd_kv: 32\nd_ff: 128\n"
                                               "ffn: relu\nvocab: 200\n")
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": 3 + i for i in range(201)},
             **{f"<extra_id_{i}>": 303 - i for i in range(100)}}  # train's T5 layout: the sentinels last
    (root / "tok-304.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}))
    for rel, text in {"metrics.jsonl": '{"step": 1, "loss": 5.0}\n', "latest": '{"dir": "step-00000003", "step": 3}',
                      # a checkpoint of train's defaults whose data position is of other data
                      "step-00000003/meta.json": GOOD_META.replace("{}", '{"precision": "fp32"}'),
                      "step-00000003/stream-rank0.json": '{"seed": 1234, "fingerprint": "of other data"}'}.items():
        path = root / "otherdata" / ("" if rel == "metrics.jsonl" else "checkpoints") / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "otherdata" / "tokens.npz").write_bytes(b"a token cache")  # a refused resume must not rewrite it
    from unittest import mock

    from scalestudy.costmodel.cpu_profile import machine_key

    with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "1"}):  # the key the case's environment gives
        (root / "badcache").mkdir()  # this machine's cached CPU profile, damaged
        (root / "badcache" / f"cpu_profile-{machine_key()}.yaml").write_bytes(bytes(range(256)) * 8)
    (root / "emitdir" / "train_config.yaml").mkdir(parents=True)  # a directory where an output file goes
    (root / "own-config").mkdir()  # a user's own run config where --emit / --print-launch write theirs
    (root / "own-config" / "train_config.yaml").write_text("# mine\nmodel: {source: t5-tiny}\n")
    (root / "own-tokenizer").mkdir()  # a user's own tokenizer (no run config) where train writes its own
    (root / "own-tokenizer" / "tokenizer.json").write_text("{}\n")
    (root / "own-profile").mkdir()  # a user's own hardware profile where calibrate writes its own
    (root / "own-profile" / "hardware_profile.yaml").write_text("# mine\nname: my-box\n")
    (root / "columnless-wal").mkdir()  # a WAL-mode store that is refused, beside a -wal of garbage (no -shm)
    with contextlib.closing(sqlite3.connect(root / "columnless-wal" / "study.sqlite")) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE trials (trial_id TEXT PRIMARY KEY, status TEXT)")
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.commit()
    (root / "columnless-wal" / "study.sqlite-wal").write_bytes(os.urandom(5000))


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-inputs-template") / "ws"
    root.mkdir()
    _build_workspace(root)
    return root


def _chattr(flag: str, *paths: Path) -> bool:
    if not shutil.which("chattr"):
        return False
    return subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True).returncode == 0


_DIGESTS: dict[tuple, str] = {}  # (path, inode, size, mtime, ctime) -> content hash (_digest)


def _digest(path: str, st: os.stat_result) -> str:
    """sha256 of the file's content, read again only when its inode, size, mtime or ctime moved: every write moves
    mtime and ctime, and ctime cannot be set back from user space. A hash read within a second of the file's last
    change is not kept: a write in the same coarse clock tick would leave the stamps as they were."""
    key = (path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key in _DIGESTS:
        return _DIGESTS[key]
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if time.time_ns() - st.st_ctime_ns > 1_000_000_000:
        _DIGESTS[key] = digest
    return digest


def snapshot(root: Path, _rel: str = "") -> dict[str, tuple]:
    """Path -> (kind, mode, size, content hash) of everything under root: kind "d" for a folder or a link to one,
    mode and size of the entry itself (not followed), the hash of regular files only."""
    out = {}
    try:
        with os.scandir(os.path.join(root, _rel)) as it:
            entries = list(it)
    except OSError:  # as os.walk: a folder that cannot be listed is left out
        return out
    for entry in entries:
        st, rel = entry.stat(follow_symlinks=False), _rel + entry.name
        is_dir = os.path.isdir(entry.path) if stat.S_ISLNK(st.st_mode) else stat.S_ISDIR(st.st_mode)
        digest = _digest(entry.path, st) if stat.S_ISREG(st.st_mode) else ""
        out[rel] = ("d" if is_dir else "f", st.st_mode, st.st_size, digest)
        if stat.S_ISDIR(st.st_mode):
            out.update(snapshot(root, rel + os.sep))
    return out


class Workspace:
    """One copy of the template that the table's cases run in, one after the other (a copy per case wrote ~70 files
    for each of ~650 cases: most of this file's time). A case adds its own files, runs, is checked against its
    own before-snapshot, then `restore` removes what it added; a workspace the case changed, or one not back to
    the template's snapshot, is replaced by a fresh copy, so no case sees another's leftovers."""

    def __init__(self, template: Path, path: Path):
        self.template, self.path = template, path
        self.fresh()

    def fresh(self) -> None:
        if self.path.exists():
            shutil.rmtree(self.path)
        shutil.copytree(self.template, self.path)
        self.baseline = snapshot(self.path)

    def restore(self, after: dict[str, tuple]) -> None:
        if any(after.get(rel) != entry for rel, entry in self.baseline.items()):
            return self.fresh()
        try:
            for rel in sorted(after.keys() - self.baseline.keys(), reverse=True):  # a folder's files before it
                p = self.path / rel
                if p.is_symlink() or not p.is_dir():
                    p.unlink()
                else:
                    p.rmdir()
        except OSError:
            return self.fresh()
        if snapshot(self.path) != self.baseline:
            self.fresh()


@dataclass
class Result:
    code: int | None
    out: str
    err: str


def run_cli(argv: list[str]) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code: int | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) or exc.code is None else 1
    return Result(code, out.getvalue(), err.getvalue())


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    expect: str  # case-insensitive text the one error line must contain (names the problem)
    immutable: tuple[str, ...] = ()  # workspace paths made immutable (chattr +i) for the case
    env: tuple[tuple[str, str], ...] = ()  # environment variables set for the case

    def __str__(self) -> str:
        return self.id


def C(id: str, cmd: str, expect: str, *, immutable: tuple[str, ...] = (), env: dict | None = None) -> Case:
    import shlex

    return Case(id, tuple(shlex.split(cmd)), expect, immutable, tuple((env or {}).items()))


MIXED_CLUSTERS = {
    "unknown-device": "gpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: 1}\n  - {device: h900, nodes: 1}\n",
    "nodes-mismatch": "nodes: 3\ngpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: 1}\n"
                      "  - {device: v100-32gb, nodes: 1}\n",
    "gpn-mismatch": "groups:\n  - {device: a100-80gb, nodes: 1, gpus_per_node: 8}\n"
                    "  - {device: v100-32gb, nodes: 1, gpus_per_node: 4}\n",
    "no-gpn": "groups:\n  - {device: a100-80gb, nodes: 1}\n  - {device: v100-32gb, nodes: 1}\n",
    "empty-groups": "groups: []\n",
    "device-and-groups": "device: a100-80gb\ngpus_per_node: 8\ngroups:\n  - {device: v100-32gb, nodes: 1}\n",
    "unknown-key": "gpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: 1, gpu: 8}\n",
    "nodes-zero": "gpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: 0}\n",
    "nodes-fraction": "gpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: 1.5}\n",
    "speed-zero": "gpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: 1, speed: 0}\n",
    "kinds": "gpus_per_node: 2\ngroups:\n  - {device: local-cpu, nodes: 1}\n  - {device: a100-80gb, nodes: 1}\n",
    "group-not-mapping": "gpus_per_node: 8\ngroups:\n  - a100-80gb\n",
    "ok": "gpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: 1}\n  - {device: v100-32gb, nodes: 1}\n",
    "speed-bool": "gpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: 1, speed: true}\n",
    "device-fields-missing": "gpus_per_node: 8\ngroups:\n  - {device: {name: x, peak_flops: {bf16: 1.0e+12}}, nodes: 1}\n",
    "device-file-missing": "gpus_per_node: 8\ngroups:\n  - {device: nowhere-dev.yaml, nodes: 1}\n",
    "device-file-bad": "gpus_per_node: 8\ngroups:\n  - {device: dev-hbm-zero.yaml, nodes: 1}\n"
                       "  - {device: v100-32gb, nodes: 1}\n",
    "link-zero": "gpus_per_node: 8\ninter_node_bytes_per_s: 0\ngroups:\n  - {device: a100-80gb, nodes: 1}\n"
                 "  - {device: v100-32gb, nodes: 1}\n",
}
DEVICE_EDITS = {"hbm-zero": ("hbm_bytes_per_s", "0"), "peak-scalar": ("peak_flops", "3"),
                "gemm-dim-zero": ("matmul_efficiency", "[[0, 0.5], [4096, 0.8]]"), "memory-zero": ("memory_bytes", "0"),
                "gemm-str": ("matmul_efficiency", "fast"), "ratio-str": ("collective_time_ratio", "{all_reduce: x}"),
                "kind-tpu": ("kind", "tpu"), "peak-zero": ("peak_flops", "{bf16: 0, fp32: 0}"),
                "peak-1e300": ("peak_flops", "{bf16: 1.0e+300}"), "memory-fraction": ("memory_bytes", "1.5")}
# a device with every required field and an empty GEMM-efficiency table (no measured ceiling either)
BARE_DEVICE = ("name: bare\nmemory_bytes: 8.0e10\npeak_flops: {bf16: 1.0e15}\nmatmul_efficiency: []\n"
               "hbm_bytes_per_s: 3.0e12\npcie_bytes_per_s: 6.4e10\nintra_node_bytes_per_s: 4.5e11\n"
               "intra_node_latency_s: 3.0e-6\ninter_node_bytes_per_s: 5.0e10\ninter_node_latency_s: 5.0e-6\n"
               "host_memory_bytes: 1.0e12\ncpu_adam_params_per_s: 1.0e9\n")
# Single-use input files, each wrong in one way: written into a case's workspace only when its command names
# the file (`case_files`), so the shared workspace every case copies stays small.
NEW_KEY_FILES = {
    "model-gpt-heads-split.yaml": "family: gpt\nd_model: 770\nlayers: 2\nheads: 12\nvocab: 512\nseq: 128\n",
    "model-llama-heads-split.yaml": "family: llama\nd_model: 100\nlayers: 2\nheads: 8\nvocab: 512\nd_ff: 256\n",
    "dev-family-unknown.yaml": BARE_DEVICE + "family: blackwell\n",  # how fast are its GEMMs?
    "dev-no-gemm.yaml": BARE_DEVICE,
    "cfg-stage-layers-int.yaml": "strategy: {stage_layers: 3}\n",
    "cfg-stage-layers-nested.yaml": "strategy: {stage_layers: [[1], 2]}\n",
    "cfg-virtual-stages-str.yaml": "strategy: {virtual_stages: two}\n",
    "cfg-sequence-parallel-str.yaml": "strategy: {sequence_parallel: maybe}\n",
    "cluster-nodes-0.yaml": "device: a100-80gb\nnodes: 0\ngpus_per_node: 8\n",
    "spec-megatron.yaml": GOOD_SPEC + "engine: megatron\n",
    "spec-train-option-unknown.yaml": GOOD_SPEC + "train_options: {learning_rate: 0.1}\n",
    "spec-stage-layers-str.yaml": GOOD_SPEC + "stage_layers: abc\n",
    "spec-attention-bad.yaml": GOOD_SPEC + "attention: [flash, sparse]\n",
    "spec-virtual-stages-float.yaml": GOOD_SPEC + "virtual_stages: 1.5\n",
    "spec-gpipe-pp1.yaml": GOOD_SPEC + "pp_schedule: gpipe\n",
    "spec-seed-negative.yaml": GOOD_SPEC + "seed: -1\n",
    "spec-slurm-partition-list.yaml": GOOD_SPEC + "executor: slurm\nslurm: {partition: [a, b]}\n",
    "spec-slurm-time-unquoted.yaml": GOOD_SPEC + "executor: slurm\nslurm: {time: 1:30:00}\n",
    "spec-env-nested.yaml": GOOD_SPEC + "env: {A: {b: 1}}\n",
    "spec-env-bad-name.yaml": GOOD_SPEC + "env: {'A B': 1}\n",
    "spec-train-option-bad-value.yaml": GOOD_SPEC + "train_options: {weight_decay: -1}\n",
    "spec-duplicate-key.yaml": GOOD_SPEC + "steps: 40\n",
    "spec-device-unknown.yaml": GOOD_SPEC + "device: h900\n",
    "spec-name-list.yaml": GOOD_SPEC.replace("name: tiny", "name: [a, b]"),
    "cfg-dropout-negative.yaml": "model: {source: t5-tiny, dropout: -0.5}\n",
    "cfg-duplicate-key.yaml": "optimizer: {lr: 0.1}\noptimizer: {lr: 0.2}\n",
    "cluster-duplicate-key.yaml": "device: a100-80gb\nnodes: 1\nnodes: 2\ngpus_per_node: 8\n",
    "spec-extra-args-unclosed.yaml": GOOD_SPEC + "extra_args: '--seed \"3'\n",
    "spec-skip-unfit-text.yaml": GOOD_SPEC + "skip_unfit: maybe\n",
    "search-trials-text.yaml": SEARCH_SPEC.replace("trials_per_model: 2", "trials_per_model: many"),
    "search-global-batch-zero.yaml": SEARCH_SPEC + "    global_batch: [0, 2]\n",
    "search-warmup-negative.yaml": SEARCH_SPEC + "    warmup_steps: [-1]\n",
    # power limits, GEMM ceilings and CPU profile rows (device and cluster YAMLs), each wrong in one way
    "dev-power-clock-twice.yaml": BARE_DEVICE + "clock_mhz: 1830\npower_clock_mhz: [[700, 1830], [700, 1500]]\n"
                                                "power_limit_w: 700\n",
    "dev-power-without-curve.yaml": BARE_DEVICE + "power_limit_w: 300\n",
    "dev-power-text.yaml": BARE_DEVICE + "clock_mhz: 1830\npower_clock_mhz: [[400, 1545], [700, 1830]]\n"
                                         "power_limit_w: lots\n",
    "dev-peak-fraction-above-1.yaml": BARE_DEVICE + "matmul_peak_fraction: 1.5\n",
    "dev-peak-fraction-nan.yaml": BARE_DEVICE + "matmul_peak_fraction: .nan\n",
    "cpu-optimizer-step-fraction.yaml": "kind: cpu\n" + BARE_DEVICE.replace("name: bare", "name: cpu-bad")
    + "optimizer_step_s: [[1.5, 1.0e+6, 0.1]]\n",
    "cpu-optimizer-step-zero-s.yaml": "kind: cpu\n" + BARE_DEVICE.replace("name: bare", "name: cpu-bad")
    + "optimizer_step_s: [[1, 1.0e+6, 0]]\n",
    "cpu-copy-bandwidth-row.yaml": "kind: cpu\n" + BARE_DEVICE.replace("name: bare", "name: cpu-bad")
    + "copy_bandwidth: [[1.0e+6]]\n",
    "cluster-power-no-curve.yaml": "device: a100-80gb\nnodes: 1\ngpus_per_node: 8\npower_limit_w: 300\n",
    "cluster-power-negative.yaml": "device: h100-80gb\nnodes: 1\ngpus_per_node: 8\npower_limit_w: -300\n",
    "cluster-power-inf.yaml": "device: h100-80gb\nnodes: 1\ngpus_per_node: 8\npower_limit_w: .inf\n",
    "cluster-power-groups.yaml": "gpus_per_node: 8\npower_limit_w: 300\ngroups:\n  - {device: h100-80gb, nodes: 1}\n",
    "cfg-kernels-list.yaml": "strategy: {kernels: [eager]}\n",
    "spec-kernels-unknown.yaml": GOOD_SPEC + "kernels: compiled\n",
    "spec-recompute-op.yaml": GOOD_SPEC + "recompute: op\n",
    # 2026-12-02: cost-model-only keys in grid entries, command_template checked when the spec is loaded
    "spec-strategies-kernels.yaml": GOOD_SPEC + "strategies:\n  - {engine: ddp, kernels: [fused, eager]}\n",
    "spec-include-tp-comm-overlap.yaml": GOOD_SPEC + "include:\n  - {tp_comm_overlap: true}\n",
    "spec-template-unknown.yaml": GOOD_SPEC + "command_template: '{python} run.py {bogus}'\n",
    "spec-template-brace.yaml": GOOD_SPEC + "command_template: '{python} run.py {'\n",
    "spec-template-format.yaml": GOOD_SPEC + "command_template: 'echo {lr:d}'\n",
    "spec-template-unclosed.yaml": GOOD_SPEC + "command_template: \"echo '{output}\"\n",
    "spec-template-blank.yaml": GOOD_SPEC + "command_template: '  '\n",
    "spec-nodes-huge.yaml": GOOD_SPEC.replace("global_batch: 2", "global_batch: 4000000") + "nodes: 2000000\n",
    "cfg-config-json-text.json": '{"model_type": "gpt2", "n_embd": "big", "n_layer": 2, "n_head": 2, "vocab_size": 99}',
    "cfg-config-json-nan.json": '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": NaN, '
                                '"num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 99}',
    "cluster-deep.yaml": "[" * 3000 + "]" * 3000 + "\n",
    "cluster-int-key.yaml": "device: a100-80gb\nnodes: 1\n8: gpus_per_node\n",
    "tok-garbage.json": "{}",
    "spec-data-number.yaml": GOOD_SPEC + "data: 5\n",
    "spec-extra-args-mapping.yaml": GOOD_SPEC + "extra_args: {seed: 1}\n",
    "spec-extra-args-unknown.yaml": GOOD_SPEC + "extra_args: [--bogus-flag, '1']\n",
    "spec-strategies-mapping.yaml": GOOD_SPEC + "strategies: {}\n",
    "spec-train-options-tokenizer.yaml": GOOD_SPEC + "train_options: {tokenizer: nowhere.json}\n",
    "search-lr-inf.yaml": SEARCH_SPEC.replace("high: 1.0e-2", "high: .inf"),
    "search-lr-log-text.yaml": SEARCH_SPEC.replace("log: true", "log: maybe"),
    "search-global-batch-fraction.yaml": SEARCH_SPEC + "    global_batch: [2.5]\n",
    "search-seed-negative.yaml": SEARCH_SPEC.replace("  trials_per_model: 2", "  trials_per_model: 2\n  seed: -1"),
    "search-reduction-inf.yaml": SEARCH_SPEC.replace("  trials_per_model: 2",
                                                     "  trials_per_model: 2\n  reduction_factor: .inf"),
    "search-target-number.yaml": SEARCH_SPEC.replace("  trials_per_model: 2", "  trials_per_model: 2\n  target_model: 5"),
    "search-budget-huge.yaml": SEARCH_SPEC.replace("budget_tokens: 640", "budget_tokens: 1.0e+300"),
    "cfg-config-json-tie-text.json": '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, '
                                     '"vocab_size": 99, "tie_word_embeddings": "no"}',
    "cfg-config-json-buckets-0.json": '{"model_type": "t5", "d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, '
                                      '"num_heads": 4, "vocab_size": 512, "relative_attention_num_buckets": 0}',
    "cluster-link-subnormal.yaml": "device: a100-80gb\nnodes: 2\ngpus_per_node: 8\ninter_node_bytes_per_s: 1.0e-320\n",
    "dev-gemm-same-dimension.yaml": BARE_DEVICE.replace("matmul_efficiency: []",
                                                        "matmul_efficiency: [[1024, 0.5], [1024, 0.7]]"),
    "spec-slurm-cpus-huge.yaml": GOOD_SPEC + "executor: slurm\nslurm: {cpus_per_task: 100000}\n",
    "spec-nproc-beyond-machine.yaml": GOOD_SPEC.replace("nproc: 1", "nproc: 100000").replace(
        "global_batch: 2", "global_batch: 200000"),
    "spec-seq-len-beyond-ram.yaml": GOOD_SPEC.replace("seq_len: 32", "seq_len: 100000000000"),
    # 2026-12-02, fix session: each config file kind fuzzed once more (train configs, study specs, clusters,
    # model config.json, corpora, tokenizers, lexicons)
    "cfg-lexicon-span.yaml": "data: {lexicon: corpus.txt}\n",
    "cfg-lr-huge.yaml": "optimizer: {lr: 1.0e+308}\n",
    "cfg-strategy-zero-text.yaml": "strategy: {zero: two}\n",
    "cfg-strategy-unknown.yaml": "strategy: {engine: ddp, colour: blue}\n",
    "cfg-strategy-list.yaml": "strategy: [ddp, 1]\n",
    "cfg-workload-nproc-huge.yaml": "workload: {nproc: 1000000000000}\n",
    "spec-include-empty.yaml": GOOD_SPEC + "include: [{}]\n",
    "spec-slurm-gpus-huge.yaml": GOOD_SPEC + "executor: slurm\nslurm: {gpus_per_node: 1000000000000}\n",
    "spec-slurm-gpus-below-nproc.yaml": GOOD_SPEC.replace("nproc: 1", "nproc: 2").replace(
        "global_batch: 2", "global_batch: 4") + "executor: slurm\nslurm: {gpus_per_node: 1}\n",
    "spec-timeout-inf.yaml": GOOD_SPEC + "timeout_s: .inf\n",
    "spec-timeout-huge.yaml": GOOD_SPEC + "timeout_s: 1.0e+308\n",
    "spec-lr-huge.yaml": GOOD_SPEC + "lr: 1.0e+308\n",
    "spec-lexicon-span.yaml": GOOD_SPEC + "train_options: {lexicon: corpus.txt}\n",
    "spec-data-empty.yaml": GOOD_SPEC + "data: empty.txt\n",
    "spec-data-latin1.yaml": GOOD_SPEC + "data: latin1.txt\n",
    "spec-tokenizer-garbage.yaml": GOOD_SPEC + "train_options: {tokenizer: garbage-tokenizer.json}\n",
    "spec-lexicon-empty.yaml": GOOD_SPEC.replace("model: t5-tiny", "model: t5-tiny\nobjective: knowledge")
    + "train_options: {lexicon: empty.txt}\n",
    "spec-env-omp-text.yaml": GOOD_SPEC + "env: {OMP_NUM_THREADS: many}\n",
    "search-lr-high-huge.yaml": SEARCH_SPEC.replace("high: 1.0e-2", "high: 1.0e+308"),
    "search-trials-huge.yaml": SEARCH_SPEC.replace("trials_per_model: 2", "trials_per_model: 1000000000000"),
    "cluster-gpn-huge.yaml": "device: a100-80gb\nnodes: 1\ngpus_per_node: 1000000000000\n",
    "cluster-device-empty.yaml": "device: ''\nnodes: 1\ngpus_per_node: 8\n",
    "cluster-latency-negative.yaml": "device: a100-80gb\nnodes: 2\ngpus_per_node: 8\ninter_node_latency_s: -1\n",
    "cluster-unknown-key.yaml": "device: a100-80gb\nnodes: 1\ngpus_per_node: 8\ncolour: blue\n",
    "cluster-nodes-text.yaml": "device: a100-80gb\nnodes: two\ngpus_per_node: 8\n",
    "cfg-config-json-vocab-0.json": '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 0}',
    "cfg-config-json-heads-3.json": '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 3, "vocab_size": 99}',
    "cfg-config-json-bert.json": '{"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, '
                                 '"num_attention_heads": 2, "vocab_size": 99}',
    "cfg-config-json-kv-heads.json": '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, '
                                     '"num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 128, '
                                     '"vocab_size": 99}',
    "cfg-config-json-list.json": "[64, 2, 2]",
    "cfg-config-json-d-negative.json": '{"model_type": "llama", "hidden_size": -64, "num_hidden_layers": 2, '
                                       '"num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 99}',
    "nofield.jsonl": '{"body": "In the beginning"}\n' * 3,
    "garbage.jsonl": "{not json\n",
    "garbage.parquet": "not a parquet file\n" * 10,
    "blank.txt": "   \n\n\t\n",
    "corrupt.txt.gz": "not gzip at all\n" * 10,
    "cluster-latency-1e308.yaml": "device: a100-80gb\nnodes: 2\ngpus_per_node: 8\ninter_node_latency_s: 1.0e+308\n",
    "dev-layer-overhead-huge.yaml": BARE_DEVICE.replace("matmul_efficiency: []", "matmul_efficiency: [[1024, 0.5]]")
    + "layer_overhead_s: 1.0e+300\n",
    "spec-extra-args-positional.yaml": GOOD_SPEC + "extra_args: [x]\n",
    "spec-extra-args-bad-value.yaml": GOOD_SPEC + "extra_args: [--seed, many]\n",
    "dev-family-x-with-table.yaml": BARE_DEVICE.replace("matmul_efficiency: []", "matmul_efficiency: [[1024, 0.5]]")
    + "family: x\nmatmul_peak_fraction: 0.7\n",
    "dev-hbm-1e308.yaml": BARE_DEVICE.replace("matmul_efficiency: []", "matmul_efficiency: [[1024, 0.5]]")
    .replace("hbm_bytes_per_s: 3.0e12", "hbm_bytes_per_s: 1.0e+308"),
    "cluster-bandwidth-1e308.yaml": "device: a100-80gb\nnodes: 2\ngpus_per_node: 8\ninter_node_bytes_per_s: 1.0e+308\n",
    "spec-name-mapping.yaml": GOOD_SPEC.replace("name: tiny", "name: {}"),
    # 2026-12-02, badinput session
    "cfg-config-json-huge.json": '{"model_type": "gpt2", "n_embd": 1e300, "n_layer": 2, "n_head": 2, "vocab_size": 99}',
    "cfg-strategy-zero-bool.yaml": "strategy: {zero: true}\n",
    "cfg-resume-true.yaml": "output: {resume: true}\n",  # as a resumed run's DIR/train_config.yaml records it
    "cluster-alias-bomb.yaml": "".join(f"{a}: &{a} [{', '.join([f'*{b}' if b else 'x'] * 9)}]\n" for a, b in zip(
        "abcdefgh", ["", *"abcdefg"])) + "device: [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n",  # 9^9 values
    # 2026-12-04: another tool's name for an option, in each YAML a user writes (near_keys: one did-you-mean rule)
    "cfg-strategy-learning-rate.yaml": "strategy: {engine: ddp, learning_rate: 0.1}\n",
    "cfg-workload-learning-rate.yaml": "workload: {seq_len: 32, learning_rate: 0.1}\n",
    "cfg-optimizer-learning-rate.yaml": "optimizer: {learning_rate: 0.1}\n",
    "cfg-flat-learning-rate.yaml": "learning_rate: 0.1\n",
    "cluster-learning-rate.yaml": "device: a100-80gb\nnodes: 1\ngpus_per_node: 8\nlearning_rate: 3.0e-4\n",
    "cluster-num-nodes.yaml": "device: a100-80gb\nnum_nodes: 2\ngpus_per_node: 8\n",
    "model-num-layers.yaml": "family: gpt\nd_model: 64\nlayers: 2\nheads: 2\nvocab: 99\nseq: 64\nnum_layers: 3\n",
    "dev-hbm-misspelt.yaml": BARE_DEVICE.replace("hbm_bytes_per_s", "hbm_bytes_per_sec"),
    "spec-learning-rate.yaml": GOOD_SPEC + "learning_rate: 0.1\n",
    "spec-optimizer-kind-typo.yaml": GOOD_SPEC + "optimizer_kind: adam\n",
    "spec-recompute-typo.yaml": GOOD_SPEC + "recompute: fulll\n",
    # 2026-12-04, fuzz: a falsy value of the wrong type read as "not given"; a section that is a list
    "spec-include-mapping.yaml": GOOD_SPEC + "include: {}\n",
    "spec-include-zero.yaml": GOOD_SPEC + "include: 0\n",
    "spec-env-list.yaml": GOOD_SPEC + "env: []\n",
    "spec-env-text.yaml": GOOD_SPEC + "env: ''\n",
    "spec-train-options-list.yaml": GOOD_SPEC + "train_options: []\n",
    "spec-data-zero.yaml": GOOD_SPEC + "data: 0\n",
    "spec-data-blank.yaml": GOOD_SPEC + "data: ''\n",
    "spec-slurm-list.yaml": GOOD_SPEC + "executor: slurm\nslurm: []\n",
    "spec-extra-args-zero.yaml": GOOD_SPEC + "extra_args: 0\n",
    "spec-description-list.yaml": GOOD_SPEC + "description: []\n",
    "spec-slurm-time-text.yaml": GOOD_SPEC + "executor: slurm\nslurm: {time: two hours}\n",
    "cfg-section-list.yaml": "model: []\nstrategy: {engine: ddp}\n",
    "model-family-list.yaml": "family: [gpt]\nd_model: 64\nlayers: 2\nheads: 2\nvocab: 99\nseq: 64\n",
    "model-d-model-blank.yaml": "family: gpt\nd_model:\nlayers: 2\nheads: 2\nvocab: 99\nseq: 64\n",
    "model-seq-blank.yaml": "family: gpt\nd_model: 64\nlayers: 2\nheads: 2\nvocab: 99\nseq:\n",
    "cfg-config-json-type-list.json": '{"model_type": ["gpt2"], "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 99}',
    "cluster-nodes-base-60.yaml": "device: a100-80gb\nnodes: 1:0\ngpus_per_node: 8\n",  # YAML 1.1: 60 nodes
    "spec-steps-base-60.yaml": GOOD_SPEC.replace("steps: 4", "steps: 1:30"),  # 90 steps
    # 2026-12-04, fuzz round 3: model config.json / model YAML, cluster YAML numbers
    "cfg-config-json-deep.json": "[" * 3000 + "]" * 3000,  # json's decoder recursed: RecursionError
    "cfg-config-json-mpt-ffn-text.json": '{"model_type": "mpt", "d_model": 64, "n_layers": 2, "n_heads": 4, '
                                         '"vocab_size": 99, "ffn_config": "mptmlp"}',
    "cfg-config-json-gpt2-experts.json": '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, '
                                         '"vocab_size": 99, "num_experts": 8}',  # priced dense, silently
    "cfg-config-json-layers-2-22.json": '{"model_type": "gpt2", "n_embd": 64, "n_layer": 4194304, "n_head": 2, '
                                        '"vocab_size": 99}',  # ZeRO-3's module trace: MemoryError (plan: hours)
    "cfg-config-json-name-100k.json": '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, '
                                      '"vocab_size": 99, "_name_or_path": "' + "x" * 100_000 + '"}',  # 160 s to print
    "cluster-group-nodes-inf.yaml": "gpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: .inf}\n",
    "cluster-nodes-400-digits.yaml": f"device: a100-80gb\nnodes: 1{'0' * 400}\ngpus_per_node: 8\n",
    "spec-lr-400-digits.yaml": GOOD_SPEC + f"lr: 1{'0' * 400}\n",
    "cfg-beta1-400-digits.yaml": f"optimizer: {{beta1: 1{'0' * 400}}}\n",
    "cfg-eps-arabic-digits.yaml": "optimizer: {eps: '\u0661\u0662'}\n",  # float('١٢') is 12.0
    "search-lr-400-digits.yaml": SEARCH_SPEC.replace("low: 1.0e-4", f"low: 1{'0' * 400}"),
    # past Python's 4,300-digit int limit the parsers themselves raise ValueError (a traceback before any check)
    "cluster-nodes-5000-digits.yaml": f"device: a100-80gb\nnodes: 1{'0' * 5000}\ngpus_per_node: 8\n",
    "model-d-model-5000-digits.yaml": f"family: gpt2\nd_model: 1{'0' * 5000}\nlayers: 2\nheads: 2\nvocab: 99\n",
    "cfg-config-json-layers-5000-digits.json": '{"model_type": "gpt2", "n_embd": 64, "n_layer": 1' + "0" * 5000 +
                                               ', "n_head": 2, "vocab_size": 99}',
    "cfg-steps-negative.yaml": "workload: {steps: -3}\n",
    "cluster-power-1e300.yaml": "device: h100-80gb\nnodes: 1\ngpus_per_node: 8\npower_limit_w: 1.0e+300\n",
    "spec-name-newline.yaml": GOOD_SPEC.replace("name: tiny", 'name: "x\\necho injected"'),
    "spec-slurm-poll-0.yaml": GOOD_SPEC + "executor: slurm\nslurm: {poll_s: 0}\n",
    "deep.jsonl": '{"text": ' + "[" * 5000 + "]" * 5000 + "}\n",
    "tok/tokenizer.json": "{}",
    "tiny-w.txt": "w1 w2\n",
    "search-data-missing.yaml": SEARCH_SPEC + "data: nowhere.txt\n",
    "spec-tokenizer-over-model.yaml": GOOD_SPEC.replace("model: t5-tiny", "model: model-vocab-200.yaml") +
                                      "train_options: {tokenizer: tok-304.json}\n",
    "runs-loss-twice.csv": "model,params,tokens,flops,loss,loss\n" + "".join(
        f"m{i},{1e6 * (i + 1)},1e8,{6e14 * (i + 1)},{4 - 0.1 * i},1\n" for i in range(6)),
    # 2026-12-04, fuzz7: a vanishing fraction or speed (a step time of 'inf'); a flag given as text; control characters
    "dev-gemm-fraction-subnormal.yaml": BARE_DEVICE.replace("matmul_efficiency: []",
                                                            "matmul_efficiency: [[1024, 5.0e-324]]"),
    "dev-nvme-fraction-subnormal.yaml": BARE_DEVICE.replace("matmul_efficiency: []", "matmul_efficiency: [[1024, 0.5]]")
    + "nvme_fraction_of_pcie: 5.0e-324\n",
    "cluster-group-speed-subnormal.yaml": "gpus_per_node: 8\ngroups:\n  - {device: a100-80gb, nodes: 1, speed: 5.0e-324}\n"
                                          "  - {device: a100-80gb, nodes: 1}\n",
    "cfg-config-json-attention-bias-text.json": '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, '
                                                '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 99, '
                                                '"attention_bias": "false"}',  # bool("false"): priced with biases
    "cfg-config-json-mpt-alibi-text.json": '{"model_type": "mpt", "d_model": 64, "n_layers": 2, "n_heads": 4, '
                                           '"vocab_size": 99, "attn_config": {"alibi": "false"}}',
    "cfg-config-json-name-escape.json": '{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, '
                                        '"vocab_size": 99, "_name_or_path": "\\u001b[2J\\u001b[31mgpt2"}',  # cleared
    "cfg-config-json-experts-float.json": '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, '
                                          '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 99, '
                                          '"num_local_experts": 8.0}',  # priced as a dense model
    "spec-env-omp-huge.yaml": GOOD_SPEC + "env: {OMP_NUM_THREADS: 100000}\n",
    "search-lr-step.yaml": SEARCH_SPEC.replace("log: true", "log: true, step: 2"),  # ignored: the trials ran
    "dev-name-escape.yaml": BARE_DEVICE.replace("matmul_efficiency: []", "matmul_efficiency: [[1024, 0.5]]")
    .replace("name: bare", 'name: "\\e[2Jbare"'),  # cleared the terminal above estimate's title
    "cluster-name-newline.yaml": 'name: "a\\nb"\ndevice: a100-80gb\nnodes: 1\ngpus_per_node: 8\n',
    "latin1-metrics-run/metrics.jsonl": '{"step": 1, "loss": 5.0}\n'.encode() + "caf\xe9\n".encode("latin-1"),
    # 2026-12-05, fuzz8: blank file names in a train config (resolved, they were the config's folder)
    "cfg-files-blank.yaml": "data: {files: ['  ']}\n",
    "cfg-tokenizer-blank.yaml": "data: {tokenizer: ''}\n",
}
# Symbolic links a case names, made in its workspace (a copied template cannot hold a broken one): {name: target}
LINKS = {"dangling-link": "nowhere-at-all", "looping-link": "looping-link",
         # a link loop where a command writes a file of its output folder (made when the folder is named)
         "loop-store/study.sqlite": "study.sqlite", "loop-search/search.sqlite": "search.sqlite",
         "loop-run/summary.json": "summary.json"}
# FIFOs made in a case's workspace when the command names their first folder (or them): copying one would block
FIFOS = ("fifo-runs.csv", "fifo-profile/hardware_profile.yaml", "fifo-metrics-run/metrics.jsonl", "fifo-cluster.yaml",
         "fifo-config.json", "fifo-corpus.txt")
# run folders a --resume would continue (a sound checkpoint record), each with a metrics.jsonl that is not text
RESUMABLE = ("fifo-metrics-run", "latin1-metrics-run")
GOOD_META = '{"step": 3, "world_size": 1, "strategy": {}, "model": "t5-tiny"}'
CHECKPOINTS = (("ckpt-meta-garbage", '{"dir": "step-00000003", "step": 3}', "{not json"),
               ("ckpt-meta-list", '{"dir": "step-00000003", "step": 3}', "[3, 1]"),
               ("ckpt-meta-step-text", '{"dir": "step-00000003", "step": 3}', GOOD_META.replace("3", '"three"')),
               ("ckpt-latest-int", '{"dir": 5}', GOOD_META),
               ("ckpt-latest-list", '["step-00000003"]', GOOD_META),
               ("ckpt-latest-escape", '{"dir": "../../run"}', GOOD_META),
               ("ckpt-other-model", '{"dir": "step-00000003", "step": 3}', GOOD_META.replace("t5-tiny", "t5-mini")),
               ("ckpt-latest-empty", "", GOOD_META),
               ("ckpt-latest-missing-step", '{"dir": "step-00000009", "step": 9}', GOOD_META),
               ("ckpt-latest-absolute", '{"dir": "/etc", "step": 3}', GOOD_META),
               ("ckpt-meta-world-size-4", '{"dir": "step-00000003", "step": 3}',
                GOOD_META.replace('"world_size": 1', '"world_size": 4')),
               ("ckpt-meta-step-negative", '{"dir": "step-00000003", "step": 3}', GOOD_META.replace("3", "-3")),
               ("ckpt-meta-strategy-list", '{"dir": "step-00000003", "step": 3}',
                GOOD_META.replace('"strategy": {}', '"strategy": [1]')),
               # save lists each file it wrote: one missing was found by torch.load, after the summary was dropped
               ("ckpt-listed-file-missing", '{"dir": "step-00000003", "step": 3}',
                GOOD_META[:-1] + ', "files": {"ddp_state.pt": 1000}}'),
               ("ckpt-meta-nested-deep", '{"dir": "step-00000003", "step": 3}', "[" * 5000 + "]" * 5000))


# Run directories whose checkpoint records are sound and one of its files is not: {name: (file, content)}
DAMAGED_CHECKPOINTS = {"ckpt-state-cut": ("ddp_state.pt", "PK\x03\x04 cut short by a full disk"),
                       "ckpt-stream-garbage": ("stream-rank0.json", '{"position": ')}


def case_files(argv: tuple[str, ...]) -> dict[str, str | bytes]:
    """The single-use files (NEW_KEY_FILES, CHECKPOINTS run directories) the command names, {path: text}."""
    named = set(argv)
    files = {name: text for name, text in NEW_KEY_FILES.items() if name in named or name.split("/")[0] in named}
    for name, pointer, meta in CHECKPOINTS:  # run directories whose checkpoint records are not what `save` writes
        if name in named:
            files.update({f"{name}/metrics.jsonl": '{"step": 1, "loss": 5.0}\n', f"{name}/checkpoints/latest": pointer,
                          f"{name}/checkpoints/step-00000003/meta.json": meta})
    for name in RESUMABLE:
        if name in named:
            files.update({f"{name}/checkpoints/latest": '{"dir": "step-00000003", "step": 3}',
                          # train's defaults on this CPU (as otherdata's)
                          f"{name}/checkpoints/step-00000003/meta.json": GOOD_META.replace("{}", '{"precision": "fp32"}')})
    for name, (file, content) in DAMAGED_CHECKPOINTS.items():
        if name in named:
            files.update({f"{name}/metrics.jsonl": '{"step": 1, "loss": 5.0}\n',
                          f"{name}/checkpoints/latest": '{"dir": "step-00000003", "step": 3}',
                          f"{name}/checkpoints/step-00000003/meta.json": GOOD_META,
                          f"{name}/checkpoints/step-00000003/{file}": content})
    return files


EST = "estimate --model t5-tiny"
PLAN = "plan --model t5-tiny --global-batch 8 --seq-len 128"
TUNE = "tune --model t5-tiny --global-batch 4 --seq-len 32 --output tuneout --profile profile.yaml"
TRAIN = "train --model t5-tiny --seq-len 32 --target-len 8 --steps 4 --no-progress --output OUT"
STORES = ("zero", "garbage", "truncated", "midcorrupt", "textfile", "foreign", "columnless")
STORE_EXPECT = {"zero": "not a study store", "garbage": "not a study store", "truncated": "corrupt",
                "midcorrupt": "corrupt", "textfile": "not a study store", "foreign": "not a study store",
                "columnless": "column"}

CASES: list[Case] = [
    # ---- usage errors (typer/click): one line, not a box ----------------------------------------------------
    C("usage-unknown-command", "frobnicate", "no such command"),
    C("usage-unknown-subcommand", "study frob x", "no such command"),
    C("usage-unknown-option", f"{EST} --bogus", "--bogus"),
    C("usage-missing-option", "estimate", "--model"),
    C("usage-not-an-int", f"{EST} --nodes abc", "--nodes"),
    C("usage-float-garbage", f"{EST} --train-tokens lots", "--train-tokens"),
    C("usage-missing-argument", "study status", "directory"),
    C("usage-missing-value", f"{EST} --gpu", "--gpu"),
    C("usage-plan-missing-batch", "plan --model t5-tiny --seq-len 8", "--global-batch"),
    C("usage-train-zero-abc", "train --zero abc", "--zero"),
    C("usage-fit-missing-source", "fit", "source"),
    C("usage-export-missing-output", "study export study", "--output"),
    C("usage-search-missing-output", "search search.yaml", "--output"),
    C("usage-extra-argument", "study status study extra", "extra"),
    C("usage-presets-extra", "presets t5", "t5"),
    C("usage-devices-unknown-option", "devices --json", "--json"),
    C("usage-validate-unknown-option", "validate --bogus", "--bogus"),
    C("usage-version-extra", "version 2", "2"),
    C("usage-demo-missing-value", "demo -o", "-o"),
    C("usage-report-missing-argument", "report", "directory"),
    C("usage-tune-missing-model", "tune --global-batch 4 --output t", "--model"),
    C("usage-calibrate-missing-output", "calibrate", "--output"),
    # ---- estimate ---------------------------------------------------------------------------------------------
    C("estimate-unknown-model", "estimate --model t5-gigantic", "t5-gigantic"),
    C("estimate-model-missing-json", "estimate --model nowhere/config.json", "nowhere"),
    C("estimate-model-garbage-json", "estimate --model garbage-tokenizer.json", "garbage-tokenizer.json"),
    C("estimate-unknown-gpu", f"{EST} --gpu h900", "h900"),
    C("estimate-gpu-malformed-yaml", f"{EST} --gpu malformed.yaml", "invalid yaml"),
    C("estimate-cluster-malformed-yaml", f"{EST} --cluster malformed.yaml", "invalid yaml"),
    C("estimate-cluster-missing", f"{EST} --cluster nowhere.yaml", "nowhere.yaml"),
    C("estimate-cluster-empty", f"{EST} --cluster empty.yaml", "cluster"),
    C("estimate-cluster-list", f"{EST} --cluster list.yaml", "cluster"),
    C("estimate-cluster-binary", f"{EST} --cluster binary.bin", "binary.bin"),
    C("estimate-tokens-nan", f"{EST} --train-tokens nan", "train-tokens"),
    C("estimate-tokens-inf", f"{EST} --train-tokens inf", "train-tokens"),
    C("estimate-tokens-negative", f"{EST} --train-tokens -5", "train-tokens"),
    C("estimate-tokens-nan-json", f"{EST} --train-tokens nan --json", "train-tokens"),
    C("estimate-seq-len-0", f"{EST} --seq-len 0", "--seq-len must be >= 1, got 0"),
    C("estimate-micro-batch-0", f"{EST} --micro-batch 0", "--micro-batch must be an integer >= 1"),
    C("estimate-zero-7", f"{EST} --zero 7", "zero"),
    C("estimate-engine-foo", f"{EST} --engine foo", "foo"),
    C("estimate-tp-3", f"{EST} --tp 3", "tp"),
    C("estimate-tp-not-whole-nodes", f"{EST} --nodes 3 --gpus-per-node 4 --tp 6",
      "--tp 6 is not a multiple of 4 devices per node"),
    C("estimate-pp-0", f"{EST} --pp 0", "pp"),
    C("estimate-precision-fp8", f"{EST} --precision fp8", "fp8"),
    C("estimate-recompute-bogus", f"{EST} --recompute bogus", "bogus"),
    C("estimate-offload-bogus", f"{EST} --offload-optimizer bogus", "bogus"),
    C("estimate-offload-params-bogus", f"{EST} --offload-params bogus", "bogus"),
    C("estimate-nodes-0", f"{EST} --nodes 0", "--nodes must be >= 1, got 0"),
    C("estimate-gpus-per-node-0", f"{EST} --gpus-per-node 0", "--gpus-per-node must be >= 1"),
    C("estimate-global-batch-0", f"{EST} --global-batch 0", "--global-batch must be >= 1"),
    C("estimate-target-len-negative", f"{EST} --target-len -1", "target"),
    # ---- plan -------------------------------------------------------------------------------------------------
    C("plan-unknown-model", "plan --model nope --global-batch 8 --seq-len 128", "nope"),
    C("plan-gpu-malformed-yaml", f"{PLAN} --gpu malformed.yaml", "invalid yaml"),
    C("plan-gpu-missing-file", f"{PLAN} --gpu nowhere.yaml", "nowhere"),
    C("plan-cluster-malformed-yaml", f"{PLAN} --cluster malformed.yaml", "invalid yaml"),
    C("plan-cluster-latin1", f"{PLAN} --cluster latin1.yaml", "utf-8"),
    C("plan-top-negative", f"{PLAN} --top -3", "--top"),
    C("plan-top-minus-one-json", f"{PLAN} --top -1 --json", "--top"),
    C("plan-min-throughput-negative", f"{PLAN} --objective min-nodes --min-throughput -5", "throughput"),
    C("plan-min-throughput-nan", f"{PLAN} --objective min-nodes --min-throughput nan", "throughput"),
    C("plan-objective-foo", f"{PLAN} --objective foo", "foo"),
    C("plan-global-batch-0", "plan --model t5-tiny --global-batch 0 --seq-len 128", "--global-batch must be"),
    C("plan-seq-len-0", "plan --model t5-tiny --global-batch 8 --seq-len 0", "--seq-len must be >= 1"),
    C("plan-train-tokens-nan", f"{PLAN} --train-tokens nan", "train-tokens"),
    C("plan-train-tokens-inf", f"{PLAN} --train-tokens inf", "train-tokens"),
    C("plan-zero-letters", f"{PLAN} --zero x", "--zero"),
    C("plan-tp-letters", f"{PLAN} --tp abc", "--tp"),
    C("plan-max-nodes-0", f"{PLAN} --max-nodes 0", "--max-nodes must be >= 1, got 0"),
    C("plan-cp-0", f"{PLAN} --cp 0", "--cp must be an integer >= 1, got 0"),
    C("plan-cp-negative", f"{PLAN} --cp -2", "--cp must be an integer >= 1, got -2"),
    C("plan-nodes-0", f"{PLAN} --nodes 0", "--nodes must be >= 1, got 0"),
    C("estimate-cluster-nodes-0", f"{EST} --cluster cluster-nodes-0.yaml", "cluster-nodes-0.yaml: nodes must be >= 1"),
    C("plan-train-steps-0", f"{PLAN} --emit emitted --train-steps 0", "steps"),
    C("plan-precision-fp8", f"{PLAN} --precision fp8", "fp8"),
    C("plan-engine-foo", f"{PLAN} --engine foo", "foo"),
    C("plan-emit-existing-file", f"{PLAN} --emit afile.txt", "afile.txt"),
    C("plan-emit-immutable-dir", f"{PLAN} --emit locked/emitted", "locked", immutable=("locked",)),
    C("plan-target-len-negative", f"{PLAN} --target-len -2", "target"),
    # ---- clusters mixing device types (cluster YAML groups) and measured stage speeds -------------------------
    C("plan-mixed-unknown-device", f"{PLAN} --cluster mixed-unknown-device.yaml", "h900"),
    C("plan-mixed-nodes-mismatch", f"{PLAN} --cluster mixed-nodes-mismatch.yaml", "groups hold 2 nodes"),
    C("plan-mixed-gpn-mismatch", f"{PLAN} --cluster mixed-gpn-mismatch.yaml", "same gpus_per_node"),
    C("plan-mixed-no-gpn", f"{PLAN} --cluster mixed-no-gpn.yaml", "gpus_per_node"),
    C("plan-mixed-empty-groups", f"{PLAN} --cluster mixed-empty-groups.yaml", "non-empty list"),
    C("plan-mixed-device-and-groups", f"{PLAN} --cluster mixed-device-and-groups.yaml", "either 'device'"),
    C("plan-mixed-unknown-key", f"{PLAN} --cluster mixed-unknown-key.yaml", "unknown key(s) gpu"),
    C("plan-mixed-nodes-zero", f"{PLAN} --cluster mixed-nodes-zero.yaml", "nodes must be a whole number"),
    C("plan-mixed-nodes-fraction", f"{PLAN} --cluster mixed-nodes-fraction.yaml", "1.5"),
    C("plan-mixed-speed-zero", f"{PLAN} --cluster mixed-speed-zero.yaml", "speed must be > 0"),
    C("plan-mixed-kinds", f"{PLAN} --cluster mixed-kinds.yaml", "mix device kinds"),
    C("plan-mixed-group-not-mapping", f"{PLAN} --cluster mixed-group-not-mapping.yaml", "group 1"),
    C("estimate-mixed-unknown-device", f"{EST} --cluster mixed-unknown-device.yaml", "h900"),
    C("estimate-mixed-bf16-on-v100", f"{EST} --cluster mixed-ok.yaml --pp 2 --precision bf16", "bf16"),
    C("estimate-mixed-interleaved", f"{EST} --cluster mixed-ok.yaml --pp 2 --precision fp16 --pp-schedule "
      "interleaved --virtual-stages 2 --global-batch 8", "interleaved"),
    C("estimate-mixed-stage-speeds-too", f"{EST} --cluster mixed-ok.yaml --pp 2 --stage-speeds 2,1", "groups"),
    C("estimate-stage-speeds-count", f"{EST} --pp 2 --stage-speeds 1,2,3", "one speed per pipeline stage"),
    C("estimate-stage-speeds-letters", f"{EST} --pp 2 --stage-speeds 2,x", "--stage-speeds"),
    C("estimate-stage-speeds-negative", f"{EST} --pp 2 --stage-speeds 2,-1", "positive"),
    C("estimate-stage-layers-auto-one-device", f"{EST} --pp 2 --stage-layers auto", "auto"),
    C("plan-stage-speeds-pp-mismatch", f"{PLAN} --stage-speeds 2,1 --pp 4", "--pp"),
    C("plan-stage-speeds-max-nodes", f"{PLAN} --stage-speeds 2,1 --max-nodes 1", "max-nodes"),
    C("plan-stage-speeds-uneven", f"{PLAN} --stage-speeds 2,1,1", "equal stages"),
    C("plan-stage-speeds-nan", f"{PLAN} --stage-speeds nan,1", "positive"),
    C("estimate-tp-comm-overlap-no-sp", f"{EST} --tp 2 --tp-comm-overlap --no-sequence-parallel",
      "--tp-comm-overlap overlaps"),
    C("estimate-megatron-zero-3", f"{EST} --engine megatron --zero 3", "megatron"),
    # megatron is cost model only: plan predicts it when named, tune (trials) and --emit (a train run) refuse it
    C("plan-optimizer-dtype-without-megatron", f"{PLAN} --optimizer-dtype bf16", "--engine megatron"),
    C("plan-emit-megatron", f"{PLAN} --engine megatron --emit emitted", "cost model only"),
    C("tune-engine-megatron", f"{TUNE} --engine megatron", "cost model only"),
    C("train-engine-megatron", f"{TRAIN} --engine megatron", "cost model only"),
    C("train-tp-comm-overlap", f"{TRAIN} --set tp_comm_overlap=true", "tp_comm_overlap"),
    C("train-overlap-param-gather", f"{TRAIN} --set overlap_param_gather=true", "overlap_param_gather"),
    C("estimate-kernels-unknown", f"{EST} --kernels triton", "unknown --kernels"),
    C("plan-kernels-unknown", f"{PLAN} --kernels compiled", "unknown --kernels"),
    C("train-kernels-fused", f"{TRAIN} --set kernels=fused", "kernels"),  # train runs eager HF models
    C("estimate-lm-head-unknown", f"{EST} --lm-head vocab-parallel", "unknown --lm-head"),
    C("plan-lm-head-unknown", f"{PLAN} --lm-head shared", "unknown --lm-head"),
    C("estimate-grad-accum-dtype-unknown", f"{EST} --grad-accum-dtype bf16", "unknown --grad-accum-dtype"),
    C("estimate-grad-accum-dtype-fsdp", f"{EST} --engine fsdp --zero 3 --grad-accum-dtype fp32",
      "describes DeepSpeed's data_types.grad_accum_dtype"),
    C("plan-grad-accum-dtype-without-deepspeed", f"{PLAN} --grad-accum-dtype fp32", "--engine deepspeed"),
    # the flags to add, not the first candidate's strategy (it named 'deepspeed with offload_optimizer none')
    C("plan-optimizer-loop-cpu-adam-bare", f"{PLAN} --optimizer-loop cpu-adam",
      "it needs --engine fsdp --offload-optimizer cpu"),
    C("plan-optimizer-loop-cpu-adam-no-offload", f"{PLAN} --engine fsdp --optimizer-loop cpu-adam",
      "it needs --engine fsdp --offload-optimizer cpu"),
    C("plan-optimizer-loop-fused-bare", f"{PLAN} --optimizer-loop fused", "it needs --engine fsdp and/or ddp"),
    C("plan-optimizer-loop-deepspeed-bf16-bare", f"{PLAN} --optimizer-loop deepspeed-bf16",
      "--zero 0 --precision bf16 and --pp 2 or more"),
    C("train-grad-accum-dtype-fp32", f"{TRAIN} --set grad_accum_dtype=fp32", "grad_accum_dtype"),
    C("estimate-grad-buckets-unknown", f"{EST} --engine ddp --grad-buckets shared", "unknown --grad-buckets"),
    C("estimate-grad-buckets-fsdp", f"{EST} --engine fsdp --zero 3 --grad-buckets view",
      "describes PyTorch DDP's gradient_as_bucket_view"),
    C("plan-grad-buckets-without-ddp", f"{PLAN} --grad-buckets copy", "--engine ddp"),
    C("train-grad-buckets-copy", f"{TRAIN} --set engine=ddp --set grad_buckets=copy", "or view, what train's DDP sets"),
    # ---- the newer surfaces, fuzzed (--set used to be overridden by every unset flag; tune made its output dir) -
    C("train-set-precision-fp8", f"{TRAIN} --set precision=fp8", "fp8"),
    C("train-set-micro-batch-0", f"{TRAIN} --set micro_batch=0", "micro_batch"),
    C("train-set-pp-schedule-bogus", f"{TRAIN} --set pp_schedule=zigzag", "zigzag"),
    C("train-set-stage-layers-letters", f"{TRAIN} --set stage_layers=x", "stage_layers"),
    C("train-set-engine-megatron", f"{TRAIN} --set engine=megatron", "cost model only"),
    C("train-config-stage-layers-int", f"{TRAIN} --config cfg-stage-layers-int.yaml", "stage_layers"),
    C("train-config-stage-layers-nested", f"{TRAIN} --config cfg-stage-layers-nested.yaml", "whole layer counts"),
    C("train-config-virtual-stages-str", f"{TRAIN} --config cfg-virtual-stages-str.yaml", "virtual_stages"),
    C("train-config-sequence-parallel-str", f"{TRAIN} --config cfg-sequence-parallel-str.yaml", "sequence_parallel"),
    C("train-gpt2-tp-heads", f"{TRAIN.replace('t5-tiny', 'gpt2-tiny').replace('--target-len 8', '--objective causal')}"
      " --engine ddp --nproc 3 --tp 3", "attention heads"),
    C("train-stage-speeds-extreme", f"{TRAIN} --engine ddp --nproc 2 --pp 2 --global-batch 4 --stage-layers auto "
      "--stage-speeds 1e-310,1", "1e12x apart"),
    C("train-stage-speeds-inf", f"{TRAIN} --engine ddp --nproc 2 --pp 2 --global-batch 4 --stage-layers auto "
      "--stage-speeds inf,1", "positive"),
    C("plan-emit-file-name-is-a-dir", f"{PLAN} --emit emitdir", "not a file"),
    C("train-print-launch-file-name-is-a-dir", f"{TRAIN.replace('OUT', 'emitdir')} --print-launch", "not a file"),
    C("plan-tp-0", f"{PLAN} --tp 0", "--tp"),
    C("plan-zero-7", f"{PLAN} --zero 1,7", "--zero"),
    C("plan-stage-layers-vs-pp", f"{PLAN} --pp 1 --stage-layers 2,2", "--pp"),
    C("estimate-interleaved-one-virtual-stage", f"{EST} --pp 2 --pp-schedule interleaved --virtual-stages 1",
      "--virtual-stages >= 2"),
    C("estimate-stage-layers-zero", f"{EST} --pp 2 --stage-layers 0,4", "at least 1 layer"),
    C("plan-mixed-speed-bool", f"{PLAN} --cluster mixed-speed-bool.yaml", "speed must be a number"),
    C("plan-mixed-device-fields-missing", f"{PLAN} --cluster mixed-device-fields-missing.yaml", "missing device field"),
    C("estimate-mixed-device-file-missing", f"{EST} --cluster mixed-device-file-missing.yaml", "nowhere-dev.yaml"),
    C("estimate-device-hbm-zero", f"{EST} --gpu dev-hbm-zero.yaml", "hbm_bytes_per_s must be > 0"),
    C("estimate-device-peak-scalar", f"{EST} --gpu dev-peak-scalar.yaml", "peak_flops"),
    C("plan-device-peak-zero", f"{PLAN} --gpu dev-peak-zero.yaml", "peak_flops must be > 0"),
    C("plan-device-gemm-str", f"{PLAN} --gpu dev-gemm-str.yaml", "[dimension, fraction]"),
    C("estimate-device-ratio-str", f"{EST} --gpu dev-ratio-str.yaml", "collective_time_ratio.all_reduce"),
    C("estimate-device-kind-tpu", f"{EST} --gpu dev-kind-tpu.yaml", "tpu"),
    C("tune-profile-peak-scalar", f"{TUNE.replace('profile.yaml', 'dev-peak-scalar.yaml')}", "peak_flops"),
    C("plan-mixed-device-file-bad", f"{PLAN} --cluster mixed-device-file-bad.yaml", "hbm_bytes_per_s"),
    C("estimate-mixed-link-zero", f"{EST} --cluster mixed-link-zero.yaml --pp 2 --precision fp16",
      "inter_node_bytes_per_s must be > 0"),
    C("estimate-model-name-with-markup", "estimate --model [bold]nope", "'[bold]nope'"),
    C("tune-tp-0", f"{TUNE} --tp 0", "--tp"),
    C("tune-pp-over-ranks", f"{TUNE} --pp 3", "no strategy"),
    C("tune-micro-batch-0", f"{TUNE} --micro-batch 0", "--micro-batch"),
    C("tune-recompute-selective", f"{TUNE} --recompute selective", "selective"),
    C("tune-offload-nvme", f"{TUNE} --offload-optimizer nvme", "nvme"),
    C("tune-memory-limit-nan", f"{TUNE} --memory-limit-gib nan", "memory-limit"),
    C("study-run-spec-megatron", "study run spec-megatron.yaml -o s", "megatron"),
    C("study-run-train-option-unknown", "study run spec-train-option-unknown.yaml -o s",
      "unknown train option(s) learning_rate (did you mean lr?) (every option: docs/run-options.md)"),
    C("study-run-spec-stage-layers-str", "study run spec-stage-layers-str.yaml -o s", "stage_layers"),
    C("study-run-spec-attention-bad", "study run spec-attention-bad.yaml -o s", "sparse"),
    C("study-run-spec-virtual-stages-float", "study run spec-virtual-stages-float.yaml -o s", "virtual_stages"),
    # ---- fix session: pipeline options at pp 1 (one rule: specs/strategy.py), empty list entries, launch device -
    C("estimate-gpipe-at-pp-1", f"{EST} --pp-schedule gpipe", "needs --pp >= 2"),
    C("estimate-stage-layers-at-pp-1", f"{EST} --stage-layers 4", "needs --pp >= 2"),
    C("estimate-stage-layers-empty", f"{EST} --pp 2 --stage-layers ''", "--stage-layers"),
    C("estimate-stage-speeds-empty-entry", f"{EST} --pp 2 --stage-speeds 2,,1", "--stage-speeds"),
    C("plan-gpipe-at-pp-1", f"{PLAN} --pp 1 --pp-schedule gpipe", "needs --pp >= 2"),
    C("plan-stage-layers-one-stage", f"{PLAN} --stage-layers 4", "needs --pp >= 2"),
    C("plan-tp-empty-entry", f"{PLAN} --tp 2,,4", "empty entries"),
    C("plan-tp-trailing-comma", f"{PLAN} --tp 2,", "empty entries"),
    C("plan-engine-empty", f"{PLAN} --engine ''", "--engine"),
    C("plan-recompute-comma", f"{PLAN} --recompute ,", "--recompute"),
    C("plan-pp-schedule-empty-entry", f"{PLAN} --pp 2 --pp-schedule 1f1b,,gpipe", "--pp-schedule"),
    C("plan-virtual-stages-empty", f"{PLAN} --virtual-stages ''", "--virtual-stages"),
    C("plan-offload-empty-entry", f"{PLAN} --offload-optimizer none,", "--offload-optimizer"),
    C("tune-pp-schedule-at-pp-1", f"{TUNE} --pp-schedule gpipe", "needs --pp >= 2"),
    C("tune-zero-empty-entry", f"{TUNE} --zero 0,,1", "--zero"),
    C("train-gpipe-at-pp-1", f"{TRAIN} --pp-schedule gpipe", "needs pp >= 2"),
    C("train-set-stage-layers-at-pp-1", f"{TRAIN} --set 'stage_layers=[4]'", "needs pp >= 2"),
    C("study-run-spec-gpipe-at-pp-1", "study run spec-gpipe-pp1.yaml -o s", "needs pp >= 2"),
    C("train-device-tpu", f"{TRAIN} --print-launch --device tpu", "tpu"),
    C("train-gpus-per-node-on-cpu", f"{TRAIN} --print-launch --device cpu --gpus-per-node 4", "--gpus-per-node"),
    C("train-gpus-per-node-without-print-launch", f"{TRAIN} --gpus-per-node 4", "--print-launch"),
    C("train-gpus-per-node-0", f"{TRAIN} --print-launch --device gpu --gpus-per-node 0", "--gpus-per-node"),
    C("plan-emit-empty-name", f"{PLAN} --emit ''", "--emit needs a directory name"),
    C("train-output-empty-name", f"{TRAIN.replace('--output OUT', '--output ' + chr(39) * 2)}", "--output"),
    C("plan-precision-empty", f"{PLAN} --precision ''", "unknown precision"),
    C("plan-offload-optimizer-empty", f"{PLAN} --offload-optimizer ''", "--offload-optimizer"),
    C("plan-text-field-without-emit", f"{PLAN} --text-field body", "--emit"),
    C("train-stage-layers-empty", f"{TRAIN} --stage-layers ''", "--stage-layers"),
    C("train-text-field-empty", f"{TRAIN} --print-launch --text-field ''", "--text-field"),
    C("plan-emit-data-missing", f"{PLAN} --emit e1 --data nowhere.txt", "nowhere.txt"),
    C("plan-emit-lexicon-missing", f"{PLAN} --emit e1 --lexicon nowhere.txt --train-objective knowledge",
      "nowhere.txt"),
    C("train-print-launch-tokenizer-missing", f"{TRAIN} --print-launch --tokenizer nowhere.json", "nowhere.json"),
    C("fit-seed-negative", "fit runs.csv --seed -1", "--seed"),
    C("tune-memory-limit-huge", f"{TUNE} --memory-limit-gib 1e308", "memory-limit"),
    C("fit-target-overflows", "fit runs.csv --target-params 1e300 --target-tokens 1e300 --bootstrap 2", "overflows"),
    C("estimate-device-gemm-dim-zero", f"{EST} --gpu dev-gemm-dim-zero.yaml", "dimensions must be >= 1"),
    C("plan-device-memory-zero", f"{PLAN} --gpu dev-memory-zero.yaml", "memory_bytes must be > 0"),
    C("estimate-auto-interleaved", f"{EST} --pp 2 --stage-layers auto --stage-speeds 2,1 --pp-schedule interleaved "
      "--virtual-stages 2", "contiguous stages"),
    C("estimate-device-family-unknown", f"{EST} --gpu dev-family-unknown.yaml", "'blackwell'"),
    C("plan-device-no-gemm-efficiency", f"{PLAN} --gpu dev-no-gemm.yaml", "matmul_efficiency"),
    C("tune-profile-family-unknown", f"{TUNE.replace('profile.yaml', 'dev-family-unknown.yaml')}", "'blackwell'"),
    C("study-run-spec-seed-negative", "study run spec-seed-negative.yaml -o s", "--seed"),
    C("study-run-spec-slurm-partition-list", "study run spec-slurm-partition-list.yaml -o s", "slurm.partition"),
    C("study-run-spec-slurm-time-unquoted", "study run spec-slurm-time-unquoted.yaml -o s", "quote it"),
    C("study-run-spec-env-nested", "study run spec-env-nested.yaml -o s", "env 'A'"),
    C("study-run-spec-env-bad-name", "study run spec-env-bad-name.yaml -o s", "'A B'"),
    C("study-run-spec-train-option-bad-value", "study run spec-train-option-bad-value.yaml -o s", "weight_decay"),
    C("study-run-spec-duplicate-key", "study run spec-duplicate-key.yaml -o s", "'steps' is given twice"),
    C("study-run-spec-device-unknown", "study run spec-device-unknown.yaml -o s", "h900"),
    C("study-run-spec-name-list", "study run spec-name-list.yaml -o s", "name must be text"),
    C("train-config-dropout-negative", f"{TRAIN} --config cfg-dropout-negative.yaml", "dropout"),
    C("train-config-duplicate-key", f"{TRAIN} --config cfg-duplicate-key.yaml", "given twice"),
    C("estimate-cluster-duplicate-key", f"{EST} --cluster cluster-duplicate-key.yaml", "'nodes' is given twice"),
    C("train-set-beta2-one", f"{TRAIN} --set beta2=1", "beta2"),
    C("train-set-eps-negative", f"{TRAIN} --set eps=-1e-8", "eps"),
    C("train-set-weight-decay-negative", f"{TRAIN} --set weight_decay=-0.1", "weight_decay"),
    C("train-seed-negative", f"{TRAIN} --seed -1", "--seed"),
    C("train-vocab-size-huge", f"{TRAIN} --vocab-size 1000000000", "vocab"),
    C("train-stage-speeds-without-auto", f"{TRAIN} --stage-speeds 2,1", "--stage-layers auto"),
    C("study-run-spec-extra-args-unclosed", "study run spec-extra-args-unclosed.yaml -o s", "extra_args"),
    C("study-run-spec-skip-unfit-text", "study run spec-skip-unfit-text.yaml -o s", "skip_unfit"),
    C("search-trials-per-model-text", "search search-trials-text.yaml -o sr", "trials_per_model"),
    C("search-global-batch-zero", "search search-global-batch-zero.yaml -o sr", "global_batch"),
    C("search-warmup-negative", "search search-warmup-negative.yaml -o sr", "warmup_steps"),
    C("calibrate-name-empty", "calibrate --output cal --name ''", "--name"),
    # ---- calibrate --------------------------------------------------------------------------------------------
    C("calibrate-nproc-0", "calibrate --nproc 0 --output cal", "nproc"),
    C("calibrate-nproc-letters", "calibrate --nproc two --output cal", "--nproc"),
    C("calibrate-output-existing-file", "calibrate --output afile.txt", "afile.txt"),
    C("calibrate-output-immutable", "calibrate --output locked/cal", "locked", immutable=("locked",)),
    C("calibrate-unknown-base", "calibrate --output cal --base h900", "h900"),
    # ---- tune -------------------------------------------------------------------------------------------------
    C("tune-engine-foo", f"{TUNE} --engine foo", "foo"),
    C("tune-engine-foo-no-profile", "tune --model t5-tiny --global-batch 4 --output tuneout --engine foo", "foo"),
    C("tune-profile-missing", f"{TUNE.replace('profile.yaml', 'missing.yaml')}", "missing.yaml"),
    C("tune-profile-malformed", f"{TUNE.replace('profile.yaml', 'malformed.yaml')}", "invalid yaml"),
    C("tune-profile-empty", f"{TUNE.replace('profile.yaml', 'empty.yaml')}", "empty.yaml"),
    C("tune-budget-negative", f"{TUNE} --budget-s -5", "budget"),
    C("tune-budget-nan", f"{TUNE} --budget-s nan", "budget"),
    C("tune-budget-negative-no-profile", "tune --model t5-tiny --global-batch 4 --output tuneout --budget-s -5",
      "budget"),
    C("tune-warmup-over-steps", f"{TUNE} --steps 3 --warmup 5", "warmup"),
    C("tune-steps-0", f"{TUNE} --steps 0 --warmup 0", "steps"),
    C("tune-steps-10-to-12", f"{TUNE} --steps 1000000000000", "short trial"),
    C("tune-nproc-0", f"{TUNE} --nproc 0", "nproc"),
    C("tune-output-existing-file", f"{TUNE.replace('tuneout', 'afile.txt')}", "afile.txt"),
    C("tune-output-immutable", f"{TUNE.replace('tuneout', 'locked/t')}", "locked", immutable=("locked",)),
    C("tune-unknown-model", f"{TUNE.replace('t5-tiny', 'nope')}", "nope"),
    C("tune-global-batch-0", f"{TUNE.replace('--global-batch 4', '--global-batch 0')}", "batch"),
    C("tune-seq-len-0", f"{TUNE.replace('--seq-len 32', '--seq-len 0')}", "seq"),
    C("tune-max-trials-negative", f"{TUNE} --max-trials -1", "max-trials"),
    C("tune-margin-negative", f"{TUNE} --margin -1", "margin"),
    C("tune-trial-timeout-0", f"{TUNE} --trial-timeout-s 0", "timeout"),
    C("tune-offload-bogus", f"{TUNE} --offload bogus", "bogus"),
    C("tune-zero-9", f"{TUNE} --zero 9", "9"),
    C("tune-screen-negative", f"{TUNE} --screen -1", "screen"),
    # ---- train ------------------------------------------------------------------------------------------------
    C("train-unknown-model", f"{TRAIN} --model t5-gigantic", "t5-gigantic"),
    C("train-engine-foo", f"{TRAIN} --engine foo", "foo"),
    C("train-zero-5", f"{TRAIN} --zero 5", "zero"),
    C("train-steps-0", f"{TRAIN} --steps 0", "steps"),
    C("train-warmup-over-steps", f"{TRAIN} --warmup 5 --steps 3", "warmup"),
    C("train-grad-clip-negative", f"{TRAIN} --grad-clip -1", "grad-clip"),
    C("train-grad-clip-nan", f"{TRAIN} --grad-clip nan", "grad-clip"),
    C("train-lr-0", f"{TRAIN} --lr 0", "lr"),
    C("train-lr-nan", f"{TRAIN} --lr nan", "lr"),
    C("train-lr-inf", f"{TRAIN} --lr inf", "lr"),
    C("train-objective-foo", f"{TRAIN} --objective foo", "foo"),
    C("train-objective-causal-t5", f"{TRAIN} --objective causal", "encoder-decoder"),
    C("train-decay-foo", f"{TRAIN} --decay foo", "foo"),
    C("train-precision-fp8", f"{TRAIN} --precision fp8", "fp8"),
    C("train-nproc-0", f"{TRAIN} --nproc 0", "nproc"),
    C("train-nnodes-2", f"{TRAIN} --nnodes 2", "nnodes"),
    C("train-seq-len-0", f"{TRAIN} --seq-len 0", "seq-len"),
    C("train-micro-batch-0", f"{TRAIN} --micro-batch 0", "micro"),
    C("train-global-below-micro", f"{TRAIN} --micro-batch 4 --global-batch 3", "global-batch"),
    C("train-save-every-negative", f"{TRAIN} --save-every -1", "save-every"),
    C("train-offload-nvme", f"{TRAIN} --engine deepspeed --zero 2 --offload-optimizer nvme", "nvme"),
    C("train-recompute-selective", f"{TRAIN} --recompute selective", "selective"),
    C("train-vocab-size-1", f"{TRAIN} --vocab-size 1", "vocab"),
    # below the tokenizer's floor: plan --emit wrote the run (train refused it once training its tokenizer started)
    C("plan-emit-vocab-size-300", f"{PLAN} --emit e1 --vocab-size 300", "error: --vocab-size must be at least 512"),
    C("train-data-missing", f"{TRAIN} --data nowhere.txt", "nowhere.txt"),
    C("train-data-empty", f"{TRAIN} --data empty.txt", "empty.txt"),
    C("train-data-binary", f"{TRAIN} --data binary.bin", "binary.bin"),
    C("train-data-unknown-ext", f"{TRAIN} --data corpus.xyz", "corpus.xyz"),
    C("train-data-directory", f"{TRAIN} --data plotdir", "plotdir is a directory: --data takes corpus files"),
    C("plan-emit-data-directory", f"{PLAN} --emit e1 --data plotdir", "plotdir is a directory: --data takes a file"),
    C("train-tokenizer-garbage", f"{TRAIN} --tokenizer garbage-tokenizer.json", "tokenizer"),
    C("train-tokenizer-missing", f"{TRAIN} --tokenizer nowhere.json", "nowhere.json"),
    C("train-lexicon-missing", f"{TRAIN} --objective knowledge --lexicon nowhere.txt", "nowhere.txt"),
    C("train-config-malformed", f"{TRAIN} --config malformed.yaml", "invalid yaml"),
    C("train-config-list", f"{TRAIN} --config list.yaml", "mapping"),
    C("train-config-missing", f"{TRAIN} --config nowhere.yaml", "nowhere.yaml"),
    C("train-config-unknown-key", f"{TRAIN} --config cfg-unknown.yaml", "bogus_option"),
    C("train-config-bad-type", f"{TRAIN.replace('--steps 4 ', '')} --config cfg-badtype.yaml", "steps"),
    C("train-resume-no-checkpoint", f"{TRAIN.replace('OUT', 'fresh')} --resume", "checkpoint"),
    C("train-output-existing-file", f"{TRAIN.replace('OUT', 'afile.txt')}", "afile.txt"),
    C("train-output-holds-run", f"{TRAIN.replace('OUT', 'run')}", "--resume"),
    C("train-output-immutable", f"{TRAIN.replace('OUT', 'locked/run')}", "locked", immutable=("locked",)),
    C("train-print-launch-existing-file", f"{TRAIN.replace('OUT', 'afile.txt')} --print-launch", "afile.txt"),
    C("train-print-launch-immutable", f"{TRAIN.replace('OUT', 'locked/run')} --print-launch", "locked",
      immutable=("locked",)),
    C("train-target-len-negative", f"{TRAIN} --target-len -1", "target-len"),
    *[C(f"train-resume-{name}", f"{TRAIN.replace('OUT', name)} --engine ddp --resume",
        "no complete checkpoint" if "latest" in name else "holds model t5-mini" if "model" in name else
        "ddp_state.pt is missing" if "listed" in name else "checkpoint")
      for name, _, _ in CHECKPOINTS],
    # a file cut short: torch.load's traceback in the rank, after the run's summary was dropped
    *[C(f"train-resume-{name}", f"{TRAIN.replace('OUT', name)} --engine ddp --resume", f"{file} is damaged")
      for name, (file, _) in DAMAGED_CHECKPOINTS.items()],
    # ---- study run --------------------------------------------------------------------------------------------
    C("study-run-spec-missing", "study run nowhere.yaml -o s", "nowhere.yaml"),
    C("study-run-spec-malformed", "study run malformed.yaml -o s", "invalid yaml"),
    C("study-run-spec-empty", "study run empty.yaml -o s", "empty"),
    C("study-run-spec-list", "study run list.yaml -o s", "mapping"),
    C("study-run-spec-scalar", "study run scalar.yaml -o s", "mapping"),
    C("study-run-spec-binary", "study run binary.bin -o s", "utf-8"),
    C("study-run-spec-unknown-key", "study run spec-unknown.yaml -o s", "colour"),
    C("study-run-spec-bad-model", "study run spec-badmodel.yaml -o s", "t5-gigantic"),
    C("study-run-spec-steps-0", "study run spec-steps0.yaml -o s", "steps"),
    C("study-run-spec-lr-nan", "study run spec-lrnan.yaml -o s", "lr"),
    C("study-run-spec-concurrency-0", "study run spec-conc0.yaml -o s", "concurrency"),
    C("study-run-spec-executor-mars", "study run spec-executor.yaml -o s", "mars"),
    C("study-run-spec-no-valid-trial", "study run spec-nogrid.yaml -o s", "no valid trial"),
    C("study-run-spec-warmup-over-steps", "study run spec-warmup.yaml -o s", "warmup"),
    C("study-run-spec-data-missing", "study run spec-data-missing.yaml -o s", "nowhere.txt"),
    C("study-run-executor-mars", "study run good.yaml -o s --executor mars", "mars"),
    C("study-run-concurrency-0", "study run good.yaml -o s --concurrency 0", "concurrency"),
    C("study-run-concurrency-negative", "study run good.yaml -o s --concurrency -2", "concurrency"),
    C("study-run-retry-bogus", "study run good.yaml -o s --retry BOGUS", "BOGUS"),
    C("study-run-output-existing-file", "study run good.yaml -o afile.txt", "afile.txt"),
    C("study-run-output-immutable", "study run good.yaml -o locked/s", "locked", immutable=("locked",)),
    C("study-run-search-spec", "study run search.yaml -o s", "search"),
    *[C(f"study-run-into-{s}-store", f"study run good.yaml -o {s}", STORE_EXPECT[s]) for s in STORES],
    # ---- study status / export / report on broken stores ------------------------------------------------------
    C("study-status-meta-not-json", "study status badmeta", "not JSON"),
    C("report-meta-not-json", "report badmeta", "not JSON"),
    C("study-run-into-meta-not-json", "study run good.yaml -o badmeta", "not JSON"),
    C("study-status-missing-dir", "study status nowhere", "no study store"),
    C("study-status-empty-dir", "study status nostore", "no study store"),
    C("study-status-file", "study status afile.txt", "afile.txt"),
    *[C(f"study-status-{s}", f"study status {s}", STORE_EXPECT[s]) for s in STORES],
    *[C(f"study-export-{s}", f"study export {s} -o {s}.csv", STORE_EXPECT[s]) for s in STORES],
    *[C(f"report-{s}", f"report {s}", STORE_EXPECT[s]) for s in STORES],
    *[C(f"fit-{s}", f"fit {s}", STORE_EXPECT[s]) for s in STORES],
    C("study-export-missing-dir", "study export nowhere -o x.csv", "no study store"),
    C("study-export-output-is-dir", "study export study -o export-dir.csv", "export-dir.csv"),
    C("study-export-bad-suffix", "study export study -o out.txt", "out.txt"),
    C("study-export-bad-table", "study export study -o out.csv --table bogus", "bogus"),
    C("study-export-immutable", "study export study -o locked/out.csv", "locked", immutable=("locked",)),
    C("study-export-output-parent-file", "study export study -o afile.txt/out.csv", "afile.txt"),
    C("report-plots-is-a-file", "report study-plots-file", "not a directory"),
    C("report-md-is-a-dir", "report study-report-dir", "not a file"),
    C("report-missing-dir", "report nowhere", "no study store"),
    C("report-file", "report afile.txt", "afile.txt"),
    C("study-export-parquet-into-dir", "study export study -o export-dir.csv/x.parquet --table bogus", "bogus"),
    C("study-export-metrics-output-is-dir", "study export study -o plotdir --table metrics", "plotdir"),
    C("report-empty-dir", "report nostore", "no study store"),
    C("report-immutable-study", "report study", "study", immutable=("study", "study/study.sqlite")),
    # ---- fit --------------------------------------------------------------------------------------------------
    C("fit-missing-source", "fit nowhere.csv", "nowhere.csv"),
    C("fit-csv-missing-columns", "fit nocols.csv", "column"),
    C("fit-csv-empty", "fit empty.csv", "empty.csv"),
    C("fit-csv-binary", "fit binary.bin", "binary.bin"),
    C("fit-law-foo", "fit runs.csv --law foo", "foo"),
    C("fit-level-2", "fit runs.csv --level 2", "--level (the intervals' confidence level) must be in (0, 1)"),
    C("fit-level-nan", "fit runs.csv --level nan", "--level (the intervals' confidence level) must be"),
    C("fit-bootstrap-negative", "fit runs.csv --bootstrap -1", "bootstrap"),
    C("fit-k-letters", "fit runs.csv --flops-per-param-token many", "flops-per-param-token"),
    C("fit-k-negative", "fit runs.csv --flops-per-param-token -6", "--flops-per-param-token (k in C = k N D) must be"),
    C("fit-target-params-nan", "fit runs.csv --target-params nan --target-tokens 1e9", "--target-params must be"),
    C("fit-target-params-negative", "fit runs.csv --target-params -1 --target-tokens 1e9", "--target-params must be"),
    C("fit-budget-negative", "fit runs.csv --budget-flops -1", "--budget-flops must be a positive"),
    C("fit-budget-inf", "fit runs.csv --budget-flops inf", "--budget-flops must be a positive"),
    C("fit-target-tokens-zero", "fit runs.csv --target-params 1e9 --target-tokens 0", "--target-tokens must be a"),
    C("fit-plot-existing-dir", "fit runs.csv --bootstrap 2 --plot plotdir", "plotdir"),
    C("fit-plot-bad-suffix", "fit runs.csv --bootstrap 2 --plot fig.txt", "fig.txt"),
    C("fit-plot-immutable", "fit runs.csv --bootstrap 2 --plot locked/fig.png", "locked", immutable=("locked",)),
    C("fit-empty-store", "fit nostore", "nostore"),
    # ---- search -----------------------------------------------------------------------------------------------
    C("search-spec-missing", "search nowhere.yaml -o sr", "nowhere.yaml"),
    C("search-spec-malformed", "search malformed.yaml -o sr", "invalid yaml"),
    C("search-spec-empty", "search empty.yaml -o sr", "empty"),
    C("search-no-search-block", "search search-noblock.yaml -o sr", "search"),
    C("search-bad-space", "search search-badspace.yaml -o sr", "colour"),
    C("search-trials-0", "search search.yaml -o sr --trials-per-model 0", "trials-per-model"),
    C("search-output-existing-file", "search search.yaml -o afile.txt", "afile.txt"),
    C("search-output-immutable", "search search.yaml -o locked/sr", "locked", immutable=("locked",)),
    C("search-into-foreign-store", "search search.yaml -o foreign", "not a study store"),
    # ---- surfaces added in the 2026-12-01 session (fuzz2) -----------------------------------------------------
    C("estimate-sp-odd-seq-len", f"{EST} --tp 2 --seq-len 33 --sequence-parallel", "--seq-len 33 is not divisible"),
    C("estimate-sp-odd-target-len", f"{EST} --tp 2 --seq-len 32 --target-len 7", "--target-len 7 is not divisible"),
    C("plan-recompute-op-enc-dec-says-why", f"{PLAN} --recompute op", "decoder-only"),  # not just '0 evaluated'
    C("plan-emit-data-missing-before-search", f"{PLAN} --tp 3 --emit e1 --data nowhere.txt", "nowhere.txt"),
    C("demo-output-empty", "demo -o '' --no-progress", "needs a directory name"),
    C("study-run-output-empty", "study run good.yaml -o ''", "needs a directory name"),
    C("search-output-empty", "search search.yaml -o ''", "needs a directory name"),
    C("train-nproc-beyond-machine", f"{TRAIN} --nproc 100000", "RAM"),
    C("train-launch-nproc-vs-gpus-per-node", f"{TRAIN} --print-launch --device gpu --nproc 4 --gpus-per-node 8",
      "give one"),
    C("train-recompute-op", f"{TRAIN} --recompute op", "op"),
    C("train-engine-internlm", f"{TRAIN} --engine internlm --zero 1", "cost model only"),
    C("tune-recompute-op", f"{TUNE} --recompute op", "op"),
    C("tune-engine-internlm", f"{TUNE} --engine internlm", "internlm"),
    C("tune-budget-fraction-nan", f"{TUNE} --budget-fraction nan", "budget-fraction"),
    C("tune-contenders-0", f"{TUNE} --contenders 0", "contenders"),
    C("estimate-internlm-zero-3", f"{EST} --engine internlm --zero 3", "internlm"),
    C("estimate-recompute-op-enc-dec", f"{EST} --recompute op", "decoder-only"),
    C("estimate-kernels-empty", f"{EST} --kernels ''", "unknown --kernels"),
    # ---- an option is named as the user gave it: the flag typed (not the field optimizer_loop), the key of a YAML ---
    C("estimate-optimizer-loop-fused-flag", f"{EST} --optimizer-loop fused", "--optimizer-loop fused describes"),
    C("estimate-fsdp-offload-flags", f"{EST} --engine fsdp --zero 3 --offload-params cpu",
      "set both --offload-params and --offload-optimizer to cpu"),
    C("estimate-virtual-stages-without-interleaved", f"{EST} --virtual-stages 2", "--virtual-stages 2 needs "
      "--pp-schedule interleaved"),
    C("plan-offload-optimizer-bogus", f"{PLAN} --offload-optimizer bogus", "unknown --offload-optimizer 'bogus'"),
    C("plan-sequence-parallel-flag", f"{PLAN} --tp 2 --tp-comm-overlap --no-sequence-parallel",
      "it needs --sequence-parallel"),
    C("estimate-grad-accum-dtype-flag-keeps-deepspeed-key", f"{EST} --engine fsdp --zero 3 --grad-accum-dtype fp32",
      "--grad-accum-dtype fp32 describes DeepSpeed's data_types.grad_accum_dtype"),
    C("train-virtual-stages-flag", f"{TRAIN} --virtual-stages 2", "--virtual-stages 2 needs pp_schedule "
      "(--pp-schedule) interleaved"),
    C("train-set-virtual-stages-key", f"{TRAIN} --set virtual_stages=2", "virtual_stages (--virtual-stages) 2 needs"),
    C("train-set-optimizer-loop-key", f"{TRAIN} --set optimizer_loop=fused", "optimizer_loop fused describes"),
    C("train-config-virtual-stages-key", f"{TRAIN} --config cfg-virtual-stages-str.yaml",
      "virtual_stages (--virtual-stages) must be an integer"),
    C("study-run-spec-virtual-stages-key", "study run spec-virtual-stages-float.yaml -o s",
      "virtual_stages must be an integer"),
    C("estimate-power-clock-twice", "estimate --model gpt2-tiny --gpu dev-power-clock-twice.yaml", "same watts"),
    C("estimate-power-without-curve", "estimate --model gpt2-tiny --gpu dev-power-without-curve.yaml",
      "power_clock_mhz"),
    C("estimate-power-text", "estimate --model gpt2-tiny --gpu dev-power-text.yaml", "power_limit_w"),
    C("estimate-peak-fraction-above-1", "estimate --model gpt2-tiny --gpu dev-peak-fraction-above-1.yaml",
      "matmul_peak_fraction"),
    C("estimate-peak-fraction-nan", "estimate --model gpt2-tiny --gpu dev-peak-fraction-nan.yaml",
      "matmul_peak_fraction"),
    C("estimate-cpu-optimizer-step-fraction", "estimate --model t5-tiny --gpu cpu-optimizer-step-fraction.yaml",
      "optimizer_step_s"),
    C("estimate-cpu-optimizer-step-zero-s", "estimate --model t5-tiny --gpu cpu-optimizer-step-zero-s.yaml",
      "optimizer_step_s"),
    C("estimate-cpu-copy-bandwidth-row", "estimate --model t5-tiny --gpu cpu-copy-bandwidth-row.yaml",
      "copy_bandwidth"),
    C("estimate-cluster-power-no-curve", "estimate --model gpt2-tiny --cluster cluster-power-no-curve.yaml",
      "power_limit_w"),
    C("estimate-cluster-power-negative", "estimate --model gpt2-tiny --cluster cluster-power-negative.yaml",
      "power_limit_w"),
    C("plan-cluster-power-inf", f"{PLAN} --cluster cluster-power-inf.yaml", "power_limit_w"),
    C("plan-cluster-power-groups", f"{PLAN} --cluster cluster-power-groups.yaml", "power_limit_w"),
    C("train-config-kernels-list", f"{TRAIN} --config cfg-kernels-list.yaml", "kernels"),
    C("study-run-spec-kernels-unknown", "study run spec-kernels-unknown.yaml -o s", "kernels"),
    C("study-run-spec-recompute-op", "study run spec-recompute-op.yaml -o s", "op"),
    # ---- 2026-12-02: defects left last session, and the fuzz of this one ------------------------------------
    C("train-print-launch-nnodes-huge", f"{TRAIN} --print-launch --device cpu --nnodes 100000000", "rendezvous"),
    C("train-print-launch-gpus-per-node-huge", f"{TRAIN} --print-launch --device gpu --nnodes 2 --gpus-per-node "
      "1000000", "rendezvous"),
    C("study-run-spec-nodes-huge", "study run spec-nodes-huge.yaml -o s", "rendezvous"),
    C("study-run-spec-strategies-kernels", "study run spec-strategies-kernels.yaml -o s",
      "kernels is a cost-model option"),
    C("study-run-spec-include-tp-comm-overlap", "study run spec-include-tp-comm-overlap.yaml -o s",
      "tp_comm_overlap is a cost-model option"),
    C("study-run-spec-template-unknown", "study run spec-template-unknown.yaml -o s", "cannot fill {bogus}"),
    C("study-run-spec-template-brace", "study run spec-template-brace.yaml -o s", "command_template"),
    C("study-run-spec-template-format", "study run spec-template-format.yaml -o s", "command_template"),
    C("study-run-spec-template-unclosed", "study run spec-template-unclosed.yaml -o s", "quotation"),
    C("study-run-spec-template-blank", "study run spec-template-blank.yaml -o s", "empty command"),
    C("estimate-config-json-count-text", "estimate --model cfg-config-json-text.json", "n_embd must be a whole"),
    C("estimate-config-json-count-nan", "estimate --model cfg-config-json-nan.json", "num_hidden_layers must be"),
    C("estimate-cluster-nested-deep", f"{EST} --cluster cluster-deep.yaml", "nested too deeply"),
    C("estimate-cluster-int-key", f"{EST} --cluster cluster-int-key.yaml", "not a name"),
    C("estimate-nodes-beyond-a-job", f"{EST} --nodes 1000000000000", "ranks"),
    C("plan-nodes-2-63", f"{PLAN} --nodes 9223372036854775808", "ranks"),  # was a hang (divisors of the world)
    C("plan-global-batch-2-63", "plan --model t5-tiny --global-batch 9223372036854775807 --seq-len 128",
      "64-bit"),
    C("plan-emit-tokenizer-garbage", f"{PLAN} --emit e1 --tokenizer tok-garbage.json", "cannot load tokenizer"),
    C("plan-emit-corpus-not-utf8", f"{PLAN} --emit e1 --data latin1.txt", "utf-8"),
    C("plan-emit-corpus-empty", f"{PLAN} --emit e1 --data empty.txt", "is empty"),
    C("train-print-launch-corpus-not-utf8", f"{TRAIN} --print-launch --device cpu --data latin1.txt", "utf-8"),
    C("train-set-no-value", f"{TRAIN} --set lr=", "no value"),
    # a model YAML whose heads do not split d_model (GPT-2 / Llama attention: d_model / heads per head) was priced
    # with d_model // heads; a negative --target-len of a decoder-only model was ignored (exit 0)
    C("estimate-model-yaml-gpt-heads-split", "estimate --model model-gpt-heads-split.yaml",
      "model-gpt-heads-split.yaml: d_model 770 is not divisible by heads 12"),
    C("plan-model-yaml-llama-heads-split", "plan --model model-llama-heads-split.yaml --global-batch 8 --seq-len 64",
      "d_model 100 is not divisible by heads 8"),
    C("estimate-target-len-negative-causal", "estimate --model gpt2-tiny --target-len -1",
      "--target-len must be >= 0"),
    C("plan-target-len-negative-causal", "plan --model gpt2-tiny --global-batch 8 --seq-len 128 --target-len -2",
      "--target-len must be >= 0"),
    C("train-target-len-negative-causal", "train --model gpt2-tiny --objective causal --target-len -1 --output OUT",
      "--target-len must be >= 0"),
    # --set KEY=VALUE: one line naming the key as written and what it takes
    C("train-set-unknown-key", f"{TRAIN} --set learning_rate=1e-3",
      "learning_rate (did you mean lr?); every option: docs/run-options.md"),
    C("train-set-key-misspelt", f"{TRAIN} --set weight_decy=0.1", "(did you mean weight_decay?)"),
    C("train-set-data-number", f"{TRAIN} --set data=5", "error: data must be a list of paths, got 5"),
    C("train-set-seed-fraction", f"{TRAIN} --set seed=1.5", "error: seed must be an integer, got 1.5"),
    C("train-set-lr-negative", f"{TRAIN} --set lr=-1", "error: lr must be in (0, 1], got -1"),
    C("train-set-min-lr-ratio-2", f"{TRAIN} --set min_lr_ratio=2", "min_lr_ratio must be within [0, 1], got 2"),
    C("train-set-warmup-negative", f"{TRAIN} --set warmup=-3", "error: warmup must be >= 0, got -3"),
    C("train-set-nnodes-0", f"{TRAIN} --set nnodes=0", "error: nnodes must be >= 1, got 0"),
    C("train-set-overridden-bad-type", f"{TRAIN} --set steps=1.5", "steps"),  # --steps 4 wins, 1.5 still checked
    C("train-micro-batch-beyond-ram", f"{TRAIN} --micro-batch 1000000000000 --global-batch 1000000000000",
      "token ids alone"),
    C("calibrate-nproc-beyond-machine", "calibrate --output cal --nproc 1000000", "RAM"),
    C("study-run-spec-data-number", "study run spec-data-number.yaml -o s", "data must be"),
    C("study-run-spec-extra-args-mapping", "study run spec-extra-args-mapping.yaml -o s", "extra_args"),
    C("study-run-spec-extra-args-unknown", "study run spec-extra-args-unknown.yaml -o s", "no option --bogus-flag"),
    C("study-run-spec-strategies-mapping", "study run spec-strategies-mapping.yaml -o s", "list of mappings"),
    C("study-run-spec-train-options-tokenizer", "study run spec-train-options-tokenizer.yaml -o s", "no such file"),
    C("fit-bootstrap-huge", "fit runs.csv --bootstrap 1000000000000", "at most"),
    C("fit-k-inf", "fit runs.csv --flops-per-param-token inf", "finite"),
    C("search-lr-high-inf", "search search-lr-inf.yaml -o sr", "finite"),
    C("search-lr-log-text", "search search-lr-log-text.yaml -o sr", "space.lr"),
    C("search-global-batch-fraction", "search search-global-batch-fraction.yaml -o sr", "global_batch"),
    C("search-seed-negative", "search search-seed-negative.yaml -o sr", "search.seed"),
    C("search-reduction-factor-inf", "search search-reduction-inf.yaml -o sr", "reduction_factor"),
    C("search-target-model-number", "search search-target-number.yaml -o sr", "target_model"),
    C("search-budget-tokens-huge", "search search-budget-huge.yaml -o sr", "64-bit"),
    C("estimate-config-json-tie-text", "estimate --model cfg-config-json-tie-text.json", "true or false"),
    C("estimate-config-json-buckets-0", "estimate --model cfg-config-json-buckets-0.json", "num_buckets must be"),
    C("estimate-cluster-link-subnormal", f"{EST} --cluster cluster-link-subnormal.yaml", ">= 1 byte/s"),
    C("estimate-device-gemm-same-dimension", "estimate --model gpt2-tiny --gpu dev-gemm-same-dimension.yaml",
      "same dimension"),
    C("study-run-spec-slurm-cpus-huge", "study run spec-slurm-cpus-huge.yaml -o s --dry-run", "cpus_per_task"),
    C("study-run-lock-is-a-directory", "study run good.yaml -o lockdir", ".runner.lock: it is a directory"),
    C("study-run-spec-nproc-beyond-machine", "study run spec-nproc-beyond-machine.yaml -o s", "RAM"),
    C("study-run-spec-seq-len-beyond-ram", "study run spec-seq-len-beyond-ram.yaml -o s", "token ids alone"),
    # ---- 2026-12-02, fix session: the defects left last session, then every config file kind and the environment
    C("tune-budget-1e308", f"{TUNE} --budget-s 1e308", "30 days"),
    C("tune-trial-timeout-1e308", f"{TUNE} --trial-timeout-s 1e308", "--trial-timeout-s"),
    C("tune-max-trials-2-63", f"{TUNE} --max-trials 9223372036854775808", "--max-trials"),
    C("tune-contenders-10-12", f"{TUNE} --contenders 1000000000000", "--contenders"),
    C("tune-screen-10-12", f"{TUNE} --screen 1000000000000", "--screen"),
    C("tune-nproc-beyond-machine", f"{TUNE} --nproc 100000", "RAM"),
    C("tune-seq-len-beyond-ram", TUNE.replace("--seq-len 32", "--seq-len 100000000000"), "token ids alone"),
    C("train-lr-1e308", f"{TRAIN} --lr 1e308", "--lr must be in (0, 1], got 1e+308"),
    C("train-weight-decay-times-lr", f"{TRAIN} --set weight_decay=1e6", "weight_decay"),
    C("train-lexicon-without-knowledge", f"{TRAIN} --lexicon corpus.txt", "--objective knowledge"),
    C("train-config-lexicon-without-knowledge", f"{TRAIN} --config cfg-lexicon-span.yaml", "--objective knowledge"),
    C("train-print-launch-lexicon-without-knowledge", f"{TRAIN} --print-launch --device cpu --lexicon corpus.txt",
      "--objective knowledge"),
    C("plan-emit-lexicon-without-knowledge", f"{PLAN} --emit e1 --lexicon corpus.txt", "--train-objective knowledge"),
    C("study-run-spec-include-empty", "study run spec-include-empty.yaml -o s", "include[0] is empty"),
    C("study-run-spec-slurm-gpus-huge", "study run spec-slurm-gpus-huge.yaml -o s --dry-run", "gpus_per_node"),
    C("study-run-spec-slurm-gpus-below-nproc", "study run spec-slurm-gpus-below-nproc.yaml -o s --dry-run",
      "below nproc 2"),
    C("study-run-spec-timeout-inf", "study run spec-timeout-inf.yaml -o s", "timeout_s"),
    C("study-run-spec-timeout-1e308", "study run spec-timeout-huge.yaml -o s", "timeout_s"),
    C("study-run-spec-lr-1e308", "study run spec-lr-huge.yaml -o s", ": lr must be in (0, 1], got 1e+308"),
    C("study-run-spec-lexicon-without-knowledge", "study run spec-lexicon-span.yaml -o s", "--objective knowledge"),
    C("study-run-spec-data-empty", "study run spec-data-empty.yaml -o s", "is empty"),
    C("study-run-spec-data-latin1", "study run spec-data-latin1.yaml -o s", "utf-8"),
    C("study-run-spec-tokenizer-garbage", "study run spec-tokenizer-garbage.yaml -o s", "tokenizer"),
    C("study-run-spec-lexicon-empty", "study run spec-lexicon-empty.yaml -o s", "empty.txt"),
    C("study-run-spec-env-omp-text", "study run spec-env-omp-text.yaml -o s", "OMP_NUM_THREADS"),
    C("search-lr-high-1e308", "search search-lr-high-huge.yaml -o sr", "space.lr"),
    C("search-trials-per-model-10-12", "search search-trials-huge.yaml -o sr", "trials_per_model"),
    C("search-trials-per-model-flag-10-12", "search search.yaml -o sr --trials-per-model 1000000000000",
      "--trials-per-model"),
    C("train-config-strategy-zero-text", f"{TRAIN} --config cfg-strategy-zero-text.yaml", "zero"),
    C("train-config-strategy-unknown-key", f"{TRAIN} --config cfg-strategy-unknown.yaml", "colour"),
    C("train-config-strategy-list", f"{TRAIN} --config cfg-strategy-list.yaml", "mapping"),
    C("train-config-nproc-10-12", f"{TRAIN.replace('--steps 4 ', '')} --config cfg-workload-nproc-huge.yaml",
      "ranks"),
    C("train-config-lr-1e308", f"{TRAIN} --config cfg-lr-huge.yaml", "error: lr must be in (0, 1]"),
    C("estimate-cluster-gpus-per-node-10-12", f"{EST} --cluster cluster-gpn-huge.yaml", "ranks"),
    C("estimate-cluster-device-empty", f"{EST} --cluster cluster-device-empty.yaml", "device"),
    C("estimate-cluster-latency-negative", f"{EST} --cluster cluster-latency-negative.yaml", "inter_node_latency_s"),
    C("plan-cluster-unknown-key", f"{PLAN} --cluster cluster-unknown-key.yaml", "colour"),
    C("plan-cluster-nodes-text", f"{PLAN} --cluster cluster-nodes-text.yaml", "nodes"),
    C("estimate-config-json-vocab-0", "estimate --model cfg-config-json-vocab-0.json", "vocab_size"),
    C("estimate-config-json-heads-not-dividing", "estimate --model cfg-config-json-heads-3.json", "head"),
    C("estimate-config-json-bert", "estimate --model cfg-config-json-bert.json", "bert"),
    C("estimate-config-json-kv-heads-not-dividing", "estimate --model cfg-config-json-kv-heads.json", "key_value"),
    C("estimate-config-json-list", "estimate --model cfg-config-json-list.json", "object"),
    C("estimate-config-json-negative", "estimate --model cfg-config-json-d-negative.json", "hidden_size"),
    C("estimate-model-directory-without-config", "estimate --model plotdir", "plotdir"),
    C("train-data-jsonl-no-text-field", f"{TRAIN} --data nofield.jsonl", "no field 'text'"),
    C("train-data-jsonl-garbage", f"{TRAIN} --data garbage.jsonl", "not valid JSON"),
    C("train-data-parquet-garbage", f"{TRAIN} --data garbage.parquet", "garbage.parquet"),
    C("train-data-blank-lines", f"{TRAIN} --data blank.txt", "is empty"),
    C("train-data-gz-corrupt", f"{TRAIN} --data corrupt.txt.gz", "corrupt.txt.gz"),
    C("train-tokenizer-directory", f"{TRAIN} --tokenizer plotdir", "plotdir"),
    C("train-tokenizer-latin1", f"{TRAIN} --tokenizer latin1.txt", "tokenizer"),
    C("train-lexicon-empty", f"{TRAIN} --objective knowledge --lexicon empty.txt", "empty.txt"),
    C("train-lexicon-binary", f"{TRAIN} --objective knowledge --lexicon binary.bin", "binary.bin"),
    C("plan-micro-batch-2-63", f"{PLAN} --micro-batch 9223372036854775808", "allowed micro-batch"),
    C("estimate-micro-batch-2-63", f"{EST} --micro-batch 9223372036854775808", "micro"),
    C("estimate-seq-len-2-63", f"{EST} --seq-len 9223372036854775808", "seq"),
    C("estimate-virtual-stages-10-12", f"{EST} --pp 2 --pp-schedule interleaved --virtual-stages 1000000000000",
      "virtual"),
    C("tune-global-batch-2-63", TUNE.replace("--global-batch 4", "--global-batch 9223372036854775808"), "64-bit"),
    C("train-steps-2-63", f"{TRAIN.replace('--steps 4', '--steps 9223372036854775808')}", "steps"),
    C("train-save-every-2-63", f"{TRAIN} --save-every 9223372036854775808", "save"),
    C("estimate-cluster-latency-1e308", f"{EST} --cluster cluster-latency-1e308.yaml", "at most 3600 s"),
    C("estimate-cluster-bandwidth-1e308", f"{EST} --cluster cluster-bandwidth-1e308.yaml", "inter_node_bytes_per_s"),
    C("estimate-device-hbm-1e308", "estimate --model gpt2-tiny --gpu dev-hbm-1e308.yaml", "hbm_bytes_per_s"),
    C("estimate-device-family-x-with-table", "estimate --model gpt2-tiny --gpu dev-family-x-with-table.yaml", "'x'"),
    C("train-warmup-steps-10-12", f"{TRAIN} --warmup-steps 1000000000000", "--warmup-steps"),
    C("train-grad-clip-1e308", f"{TRAIN} --grad-clip 1e308", "--grad-clip"),
    C("plan-virtual-stages-10-12", f"{PLAN} --virtual-stages 1000000000000", "--virtual-stages"),
    C("study-run-spec-name-mapping", "study run spec-name-mapping.yaml -o s", "name"),
    C("estimate-device-layer-overhead-1e300", "estimate --model gpt2-tiny --gpu dev-layer-overhead-huge.yaml",
      "layer_overhead_s"),
    C("study-run-spec-extra-args-positional", "study run spec-extra-args-positional.yaml -o s", "unexpected extra"),
    C("study-run-spec-extra-args-bad-value", "study run spec-extra-args-bad-value.yaml -o s", "--seed"),
    C("env-omp-num-threads-text", EST, "OMP_NUM_THREADS", env={"OMP_NUM_THREADS": "many"}),
    C("env-omp-num-threads-0-measured-cpu", "estimate --model t5-tiny --gpu local-cpu", "OMP_NUM_THREADS",
      env={"OMP_NUM_THREADS": "0", "SCALESTUDY_CPU_PROFILE": "measured"}),
    C("env-omp-num-threads-list-train", TRAIN, "OMP_NUM_THREADS", env={"OMP_NUM_THREADS": "4,2"}),
    C("env-cpu-profile-typo", "estimate --model t5-tiny --gpu local-cpu", "SCALESTUDY_CPU_PROFILE",
      env={"SCALESTUDY_CPU_PROFILE": "statc"}),
    C("env-cache-dir-under-a-file", "estimate --model t5-tiny --gpu local-cpu", "SCALESTUDY_CACHE_DIR",
      env={"SCALESTUDY_CACHE_DIR": "afile.txt/cache", "SCALESTUDY_CPU_PROFILE": "measured"}),
    C("env-cache-dir-under-a-file-tune", TUNE.replace(" --profile profile.yaml", ""), "SCALESTUDY_CACHE_DIR",
      env={"SCALESTUDY_CACHE_DIR": "afile.txt", "SCALESTUDY_CPU_PROFILE": "measured"}),
    # ---- demo -------------------------------------------------------------------------------------------------
    C("demo-output-existing-file", "demo -o afile.txt --no-progress", "afile.txt"),
    C("demo-output-immutable", "demo -o locked/demo --no-progress", "locked", immutable=("locked",)),
    C("demo-output-holds-other-study", "demo -o study --no-progress", "study"),
    C("demo-output-foreign-store", "demo -o foreign --no-progress", "not a study store"),
    C("demo-output-garbage-store", "demo -o garbage --no-progress", "not a study store"),
    # ---- 2026-12-02, badinput: outputs the filesystem refuses although os.access allows them (root under /proc),
    # broken links, names too long (each once per writer: one check, outputs.py), the newer flags' combinations
    C("plan-emit-under-proc", f"{PLAN} --emit /proc/x", "cannot create /proc/x"),
    C("train-output-under-proc", TRAIN.replace("OUT", "/proc/x"), "cannot create"),
    C("train-print-launch-under-proc", f"{TRAIN.replace('OUT', '/proc/x')} --print-launch --device cpu",
      "cannot create"),
    C("study-run-output-under-proc", "study run good.yaml -o /proc/x", "cannot create"),
    C("search-output-under-proc", "search search.yaml -o /proc/x", "cannot create"),
    C("tune-output-under-proc", TUNE.replace("tuneout", "/proc/x"), "cannot create"),
    C("calibrate-output-under-proc", "calibrate --output /proc/x", "cannot create"),
    C("demo-output-under-proc", "demo -o /proc/x --no-progress", "cannot create"),
    C("study-export-under-proc", "study export study -o /proc/x.csv", "cannot create"),
    C("fit-plot-under-proc", "fit runs.csv --bootstrap 2 --plot /proc/x.png", "cannot create"),
    C("plan-emit-dangling-link", f"{PLAN} --emit dangling-link", "broken symbolic link"),
    C("train-output-looping-link", TRAIN.replace("OUT", "looping-link"), "symbolic link loop"),
    C("study-export-under-dangling-link", "study export study -o dangling-link/x.csv", "broken symbolic link"),
    C("train-data-looping-link", f"{TRAIN} --data looping-link", "looping-link"),
    C("plan-emit-name-too-long", f"{PLAN} --emit {'x' * 300}", "too long"),
    C("plan-emit-nested-name-too-long", f"{PLAN} --emit d/d/{'y' * 300}", "too long"),  # no d/d left behind
    C("train-output-file-name-is-a-dir", TRAIN.replace("OUT", "emitdir"), "is a directory"),  # before data prep
    C("estimate-model-read-error", "estimate --model /proc/self/mem", "input/output error"),
    C("estimate-config-json-count-1e300", "estimate --model cfg-config-json-huge.json", "at most 2147483647"),
    C("train-config-strategy-zero-bool", f"{TRAIN} --config cfg-strategy-zero-bool.yaml", "not True"),
    C("train-config-says-resume", f"{TRAIN} --config cfg-resume-true.yaml", "--set resume=false starts a new run"),
    C("estimate-cluster-empty-name", f"{EST} --cluster ''", "--cluster needs"),
    C("tune-profile-empty-name", f"{TUNE} --profile ''", "--profile needs"),
    C("study-run-executor-empty", "study run good.yaml -o s --executor ''", "--executor needs"),
    C("plan-virtual-stages-at-pp-1", f"{PLAN} --pp 1 --virtual-stages 2", "needs pp >= 2"),
    C("plan-virtual-stages-without-interleaved", f"{PLAN} --pp 2 --pp-schedule 1f1b --virtual-stages 2",
      "leaves out"),
    C("plan-train-steps-without-emit", f"{PLAN} --train-steps 5", "--emit"),
    C("env-cpu-profile-cache-under-proc", "estimate --model t5-tiny --gpu local-cpu", "cannot create",
      env={"SCALESTUDY_CACHE_DIR": "/proc/x", "SCALESTUDY_CPU_PROFILE": "measured"}),
    C("env-cpu-profile-cache-immutable", "estimate --model t5-tiny --gpu local-cpu", "locked",
      immutable=("locked",), env={"SCALESTUDY_CACHE_DIR": "locked", "SCALESTUDY_CPU_PROFILE": "measured"}),
    C("report-html-immutable", "report study", "cannot replace", immutable=("study/report.html",)),
    C("report-plots-immutable", "report study", "plots directory", immutable=("study/plots",)),  # was exit 0
    C("train-output-config-immutable", TRAIN.replace("OUT", "run2"), "cannot replace",  # before data prep
      immutable=("run2/train_config.yaml",)),
    C("plan-emit-plan-json-immutable", f"{PLAN} --emit e2", "cannot replace", immutable=("e2/plan.json",)),
    C("estimate-cluster-yaml-alias-bomb", f"{EST} --cluster cluster-alias-bomb.yaml", "aliases"),  # was a hang
    C("plan-emit-hf-without-name", f"{PLAN} --emit e1 --data hf:", "bad dataset spec"),
    C("estimate-model-name-like-an-emoji", "estimate --model :x:", "':x:'"),  # Rich printed a cross mark
    C("plan-emit-name-not-utf8", f"{PLAN} --emit e\udce9", "not UTF-8"),  # latin-1 bytes: half an emit, traceback
    C("train-data-name-not-utf8", f"{TRAIN} --data caf\udce9.txt", "not UTF-8"),
    C("plan-emit-into-a-run", f"{PLAN} --emit run", "already holds a run"),  # replaced the run's config
    C("train-print-launch-into-a-run", f"{TRAIN.replace('OUT', 'run')} --print-launch --device cpu", "--resume"),
    # 2026-12-04: unknown keys, each YAML a user writes: the nearest known key (near_keys), another tool's name too
    C("train-config-strategy-learning-rate", f"{TRAIN} --config cfg-strategy-learning-rate.yaml",
      "did you mean lr, in section optimizer?"),
    C("train-config-workload-learning-rate", f"{TRAIN} --config cfg-workload-learning-rate.yaml",
      "did you mean lr, in section optimizer?"),
    C("train-config-optimizer-learning-rate", f"{TRAIN} --config cfg-optimizer-learning-rate.yaml",
      "(did you mean lr?)"),
    C("train-config-flat-learning-rate", f"{TRAIN} --config cfg-flat-learning-rate.yaml", "(did you mean lr?)"),
    C("estimate-cluster-learning-rate", f"{EST} --cluster cluster-learning-rate.yaml",
      "learning_rate as lr: a training option"),
    C("estimate-cluster-num-nodes", f"{EST} --cluster cluster-num-nodes.yaml", "(did you mean nodes?)"),
    C("estimate-model-num-layers", "estimate --model model-num-layers.yaml", "(did you mean layers?)"),
    C("estimate-device-field-misspelt", f"{EST} --gpu dev-hbm-misspelt.yaml", "(did you mean hbm_bytes_per_s?)"),
    C("study-spec-learning-rate", "study run spec-learning-rate.yaml -o s", "(did you mean lr?)"),
    # 2026-12-04: options accepted and then ignored, or emitted for a `train` that refuses them
    C("plan-emit-cp", f"{PLAN} --cp 2 --emit newdir-parent/e", "cannot run --cp 2"),  # wrote nothing, after a search
    # refused after the search as 'no feasible strategy is runnable by `scalestudy train` (...(...))': now before it
    C("plan-emit-cost-model-only-model", "plan --model opt-125m --global-batch 8 --seq-len 128 --emit newdir-parent/e",
      "cannot run model opt-125m"),
    C("plan-emit-optimizer-kind-sgd", f"{PLAN} --optimizer-kind sgd --emit newdir-parent/e",
      "cannot run --optimizer-kind sgd (cost model only: train runs adamw)"),
    C("plan-emit-fp8-fsdp", f"{PLAN} --gpu h100-80gb --engine fsdp --precision fp8 --emit newdir-parent/e",
      "cannot run --precision fp8"),
    # a typo of a cost-model option's value read as a value train cannot run ('leave it adamw'), a strategy key's
    # as 'no valid trial in the grid (first: ...: unknown recompute ...)'
    C("study-spec-optimizer-kind-typo", "study run spec-optimizer-kind-typo.yaml -o s",
      "unknown optimizer_kind 'adam' (choose from adamw, sgd, sgd-momentum)"),
    C("study-spec-recompute-typo", "study run spec-recompute-typo.yaml -o s", "spec-recompute-typo.yaml: unknown "
      "recompute 'fulll'"),
    C("train-set-lm-head-gathered-tp1", f"{TRAIN} --set lm_head=gathered", "leave it engine or replicated"),  # a
    # study spec refused it, train ran it (no effect at tp 1)
    C("estimate-tp-comm-overlap-across-nodes", f"{EST} --nodes 2 --gpus-per-node 4 --engine megatron --zero 1 --tp 8 "
      "--tp-comm-overlap", "--tp 8 spans 2 nodes of 4"),  # priced without the overlap it asked for
    C("plan-tp-comm-overlap-across-nodes", f"{PLAN} --nodes 2 --gpus-per-node 4 --engine megatron --tp 8 "
      "--tp-comm-overlap", "--tp 8 spans 2 nodes of 4"),
    C("estimate-triton-attention-on-v100", f"{EST} --gpu v100-32gb --attention-kernel triton",
      "compute capability 7.0"),  # priced at FlashAttention-2's rate on a V100
    C("plan-fa2-attention-on-v100", f"{PLAN} --gpu v100-16gb --attention-kernel fa2", "compute capability 7.0"),
    C("estimate-fused-kernel-under-eager", f"{EST} --attention eager --attention-kernel fa2",
      "--attention eager runs none"),  # the kernel was read under flash only
    C("estimate-target-len-decoder-only", "estimate --model gpt2 --target-len 128", "gpt2 is decoder-only"),
    C("plan-target-len-decoder-only", "plan --model gpt2-tiny --global-batch 8 --seq-len 128 --target-len 32",
      "gpt2-tiny is decoder-only"),
    C("tune-target-len-decoder-only", TUNE.replace("t5-tiny", "gpt2-tiny") + " --target-len 8", "decoder-only"),
    C("train-target-len-causal", f"{TRAIN.replace('t5-tiny', 'gpt2-tiny')} --objective causal",
      "drop --target-len"),  # resolved to 0, dropped
    C("estimate-stage-speeds-one-stage", f"{EST} --stage-speeds 2", "two or more"),  # relative to itself: 1.0
    C("plan-stage-speeds-one-stage", f"{PLAN} --stage-speeds 0.5", "two or more"),
    C("plan-max-nodes-beyond-cluster", f"{PLAN} --max-nodes 4", "exceeds the cluster's 1 node"),  # capped at 1
    C("plan-emit-text-field-plain-corpus", f"{PLAN} --emit newdir-parent/e --text-field body",
      "bundled corpus has none"),  # before the search
    C("train-text-field-plain-corpus", f"{TRAIN} --data corpus.txt --text-field body", "has none"),  # lines, no fields
    C("train-vocab-size-with-tokenizer", f"{TRAIN} --tokenizer garbage-tokenizer.json --vocab-size 500",
      "given ready-made"),  # only a tokenizer trained on the data takes it
    # 2026-12-04, fuzz: each ran the study as if the key were absent (a falsy value was read as "not given")
    C("study-spec-include-mapping", "study run spec-include-mapping.yaml -o s", "include must be a list"),
    C("study-spec-include-zero", "study run spec-include-zero.yaml -o s", "include must be a list"),
    C("study-spec-env-list", "study run spec-env-list.yaml -o s", "env must be a mapping"),
    C("study-spec-env-text", "study run spec-env-text.yaml -o s", "env must be a mapping"),
    C("study-spec-train-options-list", "study run spec-train-options-list.yaml -o s", "train_options must be a mapping"),
    C("study-spec-data-zero", "study run spec-data-zero.yaml -o s", "data must be a corpus path"),
    C("study-spec-data-blank", "study run spec-data-blank.yaml -o s", "data must be a corpus path"),
    C("study-spec-slurm-list", "study run spec-slurm-list.yaml -o s", "slurm must be a mapping"),
    C("study-spec-extra-args-zero", "study run spec-extra-args-zero.yaml -o s", "extra_args must be"),
    C("study-spec-description-list", "study run spec-description-list.yaml -o s", "description must be text"),
    C("study-spec-slurm-time-text", "study run spec-slurm-time-text.yaml -o s --dry-run", "no slurm time limit"),
    C("train-config-section-list", f"{TRAIN} --config cfg-section-list.yaml", "section model must be a mapping"),
    C("estimate-model-family-list", "estimate --model model-family-list.yaml", "family must be gpt, llama or t5"),
    C("estimate-model-d-model-blank", "estimate --model model-d-model-blank.yaml", "a gpt model needs d_model"),
    C("plan-model-seq-blank", "plan --model model-seq-blank.yaml --global-batch 8 --seq-len 32", "needs seq"),
    C("estimate-cluster-nodes-base-60", f"{EST} --cluster cluster-nodes-base-60.yaml", "base-60 number 60"),
    C("study-spec-steps-base-60", "study run spec-steps-base-60.yaml -o s", "value 1:30 (line 9)"),
    C("study-run-no-wait-local", "study run good.yaml -o s --no-wait", "use it with --executor slurm"),  # ignored
    C("study-run-concurrency-slurm", "study run good.yaml -o s --executor slurm --dry-run --concurrency 2",
      "drop --concurrency"),  # Slurm's array ran as without it
    C("estimate-config-json-model-type-list", "estimate --model cfg-config-json-type-list.json",
      "model_type must be text"),
    C("fit-csv-column-twice", "fit runs-loss-twice.csv", "column 'loss' appears 2 times"),  # fit the last, silently
    # 2026-12-04, fuzz round 3: model config.json / model YAML, cluster YAML numbers
    C("estimate-config-json-nested-deep", "estimate --model cfg-config-json-deep.json", "nested too deeply"),
    C("estimate-config-json-mpt-ffn-config-text", "estimate --model cfg-config-json-mpt-ffn-text.json",
      "ffn_config must be a mapping"),  # AttributeError
    C("estimate-config-json-gpt2-experts", "estimate --model cfg-config-json-gpt2-experts.json", "mixture of experts"),
    C("estimate-config-json-layers-2-22", "estimate --model cfg-config-json-layers-2-22.json --engine deepspeed "
      "--zero 3", "4,194,304 layers in one stack: at most 10,000"),
    C("estimate-config-json-name-100k", "estimate --model cfg-config-json-name-100k.json",
      "_name_or_path must be text of at most 4096 characters"),
    C("estimate-cluster-group-nodes-inf", f"{EST} --cluster cluster-group-nodes-inf.yaml",
      "nodes must be a whole number >= 1, got inf"),  # OverflowError from int(inf)
    C("estimate-cluster-nodes-400-digits", f"{EST} --cluster cluster-nodes-400-digits.yaml",
      "nodes must be a finite number, got an integer of 401 digits"),  # OverflowError from float()
    C("study-spec-lr-400-digits", "study run spec-lr-400-digits.yaml -o s",
      "lr must be a finite number, got an integer of 401 digits"),  # OverflowError from math.isfinite
    C("train-config-beta1-400-digits", f"{TRAIN} --config cfg-beta1-400-digits.yaml",
      "beta1 must be a finite number, got an integer of 401 digits"),  # OverflowError from float()
    C("train-set-steps-base-60", f"{TRAIN} --set steps=1:30", "--set steps: value 1:30 (line 1) reads as the base-60 "
      "number 90"),  # --set read values with yaml.safe_load: 90 steps, not the files' rules
    C("train-config-eps-arabic-digits", f"{TRAIN} --config cfg-eps-arabic-digits.yaml",
      "eps must be a number, got '\u0661\u0662'"),  # read as 12 where --lr \u0661\u0662 is refused
    C("search-lr-low-400-digits", "search search-lr-400-digits.yaml -o sr", "search.space.lr must be"),  # OverflowError
    C("train-set-model-overridden", f"{TRAIN} --set model=t5-gigantic", "t5-gigantic"),  # --model wins: was unchecked
    C("estimate-cluster-nodes-5000-digits", f"{EST} --cluster cluster-nodes-5000-digits.yaml", "more than 4,300 digits"),
    C("estimate-model-yaml-5000-digits", "estimate --model model-d-model-5000-digits.yaml", "more than 4,300 digits"),
    C("estimate-config-json-5000-digits", "estimate --model cfg-config-json-layers-5000-digits.json",
      "more than 4,300 digits"),
    C("train-set-steps-5000-digits", f"{TRAIN} --set steps=1{'0' * 5000}", "more than 4,300 digits"),
    C("env-cache-dir-under-proc-tune", TUNE.replace(" --profile profile.yaml", ""), "cannot create /proc/x",
      env={"SCALESTUDY_CACHE_DIR": "/proc/x", "SCALESTUDY_CPU_PROFILE": "measured"}),  # left an empty --output
    # 2026-12-04, fuzz round 4: the leftovers of round 3
    C("plan-emit-over-users-config", f"{PLAN} --emit own-config", "scalestudy did not write"),  # replaced it
    C("train-output-over-users-config", TRAIN.replace("OUT", "own-config"), "scalestudy did not write"),  # likewise
    C("train-config-value-overridden", f"{TRAIN} --config cfg-steps-negative.yaml",  # --steps 4: only type-checked
      "--config cfg-steps-negative.yaml: steps must be >= 1, got -3"),
    C("report-wal-store-refused-leaves-no-shm", "report columnless-wal", "column"),  # left study.sqlite-shm
    C("estimate-device-peak-1e300", f"{EST} --gpu dev-peak-1e300.yaml", "peak_flops must be at most 1e+17"),
    C("estimate-device-memory-fraction", f"{EST} --gpu dev-memory-fraction.yaml", "whole number of bytes"),
    C("estimate-cluster-power-1e300", f"{EST} --cluster cluster-power-1e300.yaml", "power_limit_w must be at most"),
    # 2026-12-04, fuzz round 4: a newline in a name written into a Slurm script (the #SBATCH line ended there and
    # sbatch ran the rest as the script's first command); squeue asked in a loop without a pause
    C("study-spec-name-newline", "study run spec-name-newline.yaml -o s --executor slurm --dry-run",
      "name must be one line of text"),
    C("study-run-output-newline", "study run good.yaml -o 's\nx' --executor slurm --dry-run", "control character"),
    C("plan-zero-arabic-digits", f"{PLAN} --zero \u0663", "--zero takes integers"),  # int('٣') is 3: plan ran ZeRO-3
    C("study-spec-slurm-poll-0", "study run spec-slurm-poll-0.yaml -o s --dry-run", "poll_s must be a number of seconds > 0"),
    # 2026-12-04, fuzz round 5, engine side (train / study / demo; ckpt-listed-file-missing and ckpt-meta-nested-deep
    # are CHECKPOINTS rows): each was a traceback, a refusal after the run had started writing, or a wrong name
    C("train-data-jsonl-nested-deep", f"{TRAIN} --data deep.jsonl", "line 1: nested too deeply"),  # RecursionError
    C("train-output-file-where-checkpoints-go", TRAIN.replace("OUT", "ranfile"), "a file is in its place"),  # rank
    C("train-tokenizer-path-kept", f"{TRAIN} --tokenizer tok/tokenizer.json --vocab-size 600",
      "--tokenizer tok/tokenizer.json is given"),  # the message said tok/--tokenizer.json
    C("study-tokenizer-over-model-vocab", "study run spec-tokenizer-over-model.yaml -o s",
      "200-token vocabulary but the tokenizer has 304"),  # every trial failed in its ranks
    C("demo-output-holds-a-run", "demo -o run --no-progress", "and no study"),  # wrote its study and report there
    C("train-existing-dir-keeps-no-token-cache", f"{TRAIN.replace('OUT', 'nostore')} --tokenizer tok-304.json "
      "--data tiny-w.txt", "fewer than one example"),  # left tokens.npz (data.json, tokenizer.json) in a DIR it found
    C("train-cached-cpu-profile-damaged", TRAIN, "not UTF-8 text",  # the ranks refused it, the run's files written
      env={"SCALESTUDY_CACHE_DIR": "badcache", "OMP_NUM_THREADS": "1", "SCALESTUDY_CPU_PROFILE": "measured"}),
    C("study-run-cached-cpu-profile-damaged", "study run good.yaml -o s", "not UTF-8 text",  # failed every trial
      env={"SCALESTUDY_CACHE_DIR": "badcache", "OMP_NUM_THREADS": "1", "SCALESTUDY_CPU_PROFILE": "measured"}),
    C("train-resume-other-data", f"{TRAIN.replace('OUT', 'otherdata')} --resume", "trained on other data"),  # ranks
    # refused it as 'a damaged or incomplete copy' after DIR's summary was dropped and its config rewritten
    C("search-data-missing", "search search-data-missing.yaml -o sr", "corpus file not found"),  # search checked no
    # file its trials read (corpus, tokenizer, lexicon): each trial failed in its ranks, the store and trials written
    # 2026-12-04, fuzz6: never replace what scalestudy did not write; names checked though a flag overrides them
    C("tune-output-not-a-tunes", TUNE.replace("tuneout", "study"), "is not a tune's folder"),  # wrote tune.json,
    # trials/ and profiles into a study's folder
    C("calibrate-over-users-profile", "calibrate --output own-profile", "scalestudy did not write"),  # replaced it
    C("train-print-launch-file-where-checkpoints-go", f"{TRAIN.replace('OUT', 'ranfile')} --print-launch",
      "a file is in its place"),  # wrote the scripts; their torchrun ranks failed
    C("train-output-over-users-tokenizer", TRAIN.replace("OUT", "own-tokenizer"), "scalestudy did not write"),
    C("train-set-output-empty-overridden", f"{TRAIN} --set \"output=''\"", "output must name a directory"),  # unchecked
    # 2026-12-04, fuzz7: each a class of its own (~1,500 new inputs over every command)
    # a vanishing fraction of peak, NVMe share or relative speed: an 'inf' step (share 'nan%'), or a TypeError
    # traceback from estimate's / plan's stage split (train alone refused speeds 1e12x apart)
    C("estimate-device-gemm-fraction-subnormal", f"{EST} --gpu dev-gemm-fraction-subnormal.yaml",
      "fractions of peak must be in [1e-06, 1]"),
    C("estimate-device-nvme-fraction-subnormal", f"{EST} --gpu dev-nvme-fraction-subnormal.yaml --zero 3 "
      "--offload-optimizer nvme --offload-params nvme", "nvme_fraction_of_pcie must be in [1e-06, 16]"),
    C("estimate-cluster-group-speed-subnormal", f"{EST} --cluster cluster-group-speed-subnormal.yaml --pp 2 "
      "--precision fp16", "a measured relative speed, 1e-06 to 1e+06"),
    C("estimate-stage-speeds-subnormal", f"{EST} --pp 2 --stage-speeds 5e-324,1 --stage-layers auto", "1e12x apart"),
    C("plan-stage-speeds-subnormal", f"{PLAN} --pp 2 --stage-speeds 1e-320,1", "1e12x apart"),
    # a key given twice on the command line: the last silently won (a YAML file refuses it)
    C("train-set-key-twice", f"{TRAIN} --set steps=4 --set steps=40", "--set gives steps twice"),
    C("train-set-key-twice-dashed", f"{TRAIN} --set warmup_steps=1 --set warmup-steps=2", "twice"),
    # a config.json flag as text read by truthiness ("false" priced the biases); experts counted as 8.0
    C("estimate-config-json-attention-bias-text", "estimate --model cfg-config-json-attention-bias-text.json",
      "attention_bias must be true or false"),
    C("estimate-config-json-mpt-alibi-text", "estimate --model cfg-config-json-mpt-alibi-text.json",
      "alibi must be true or false"),
    C("estimate-config-json-experts-float", "estimate --model cfg-config-json-experts-float.json",
      "mixture of experts"),
    # control characters: a config's name cleared the screen above every table; a path's ESC recoloured the error
    C("estimate-config-json-name-escape", "estimate --model cfg-config-json-name-escape.json", "control character"),
    C("estimate-cluster-name-escape", f"{EST} --cluster '\x1b[31mred.yaml'", "not found: \\x1b[31mred.yaml"),
    # a FIFO read as a file: fit's CSV, calibrate's own-profile check and a resumed run's metrics waited forever;
    # a resumed run's metrics.jsonl that is not UTF-8 failed rank 0 with a traceback after DIR was rewritten
    C("fit-csv-fifo", "fit fifo-runs.csv", "not a regular file"),
    C("calibrate-output-fifo-profile", "calibrate --output fifo-profile", "scalestudy did not write"),
    C("train-resume-metrics-fifo", f"{TRAIN.replace('OUT', 'fifo-metrics-run')} --resume", "not a regular file"),
    C("train-resume-metrics-not-utf8", f"{TRAIN.replace('OUT', 'latin1-metrics-run')} --resume", "not UTF-8"),
    # threads per rank beyond any CPU: OMP_NUM_THREADS=100000 made plan --emit's CPU-profile measurement start 32,000+
    # threads, past pid_max (every fork on the machine failed)
    C("env-omp-num-threads-huge", "estimate --model t5-tiny --gpu local-cpu", "1 to 1,024",
      env={"OMP_NUM_THREADS": "100000", "SCALESTUDY_CPU_PROFILE": "measured"}),
    C("study-run-spec-env-omp-huge", "study run spec-env-omp-huge.yaml -o s", "1 to 1,024"),
    # a directory or a FIFO given as a YAML / config.json: it was 'cluster file not found'
    C("estimate-cluster-is-a-directory", f"{EST} --cluster plotdir", "cluster file plotdir is not a regular file"),
    C("estimate-cluster-fifo", f"{EST} --cluster fifo-cluster.yaml", "is not a regular file"),
    C("estimate-config-json-fifo", "estimate --model fifo-config.json", "model config fifo-config.json is not a regular"),
    C("search-lr-unknown-key", "search search-lr-step.yaml -o sr", "search.space.lr takes low, high and log, not step"),
    C("estimate-device-name-escape", f"{EST} --gpu dev-name-escape.yaml", "holds a control character"),
    C("plan-cluster-name-newline", f"{PLAN} --cluster cluster-name-newline.yaml", "holds a control character"),
    # 2026-12-05, fuzz8. A FIFO given as a corpus or tokenizer: it was 'corpus file not found' / 'no such file'
    C("train-data-fifo", f"{TRAIN} --data fifo-corpus.txt", "fifo-corpus.txt is not a regular file"),
    C("train-tokenizer-fifo", f"{TRAIN} --tokenizer fifo-corpus.txt", "fifo-corpus.txt is not a regular file"),
    C("plan-emit-data-fifo", f"{PLAN} --emit e --data fifo-corpus.txt", "fifo-corpus.txt is not a regular file"),
    # OMP_NUM_THREADS in other digits: str.isdigit() took them; '²' then made int() raise (a traceback), '١' read 1
    C("env-omp-num-threads-superscript", EST, "OMP_NUM_THREADS='²'", env={"OMP_NUM_THREADS": "\u00b2"}),
    C("env-omp-num-threads-arabic-indic", EST, "OMP_NUM_THREADS='١'", env={"OMP_NUM_THREADS": "\u0661"}),
    C("env-cache-dir-blank", "estimate --model t5-tiny --gpu local-cpu", "SCALESTUDY_CACHE_DIR=' ' is blank",
      env={"SCALESTUDY_CACHE_DIR": "  ", "SCALESTUDY_CPU_PROFILE": "measured"}),  # made a folder named '  '
    # a blank file name: it was the working directory ('corpus /home/me is a directory', 'no study store at
    # /study.sqlite', 'model config not found: config.json'), never the value typed
    C("train-data-blank", f"{TRAIN} --data ' '", "--data needs a file name, got ' '"),
    C("train-tokenizer-empty", f"{TRAIN} --tokenizer ''", "--tokenizer needs a file name, got ''"),
    C("train-config-blank", "train --config ' '", "--config needs a file name, got ' '"),
    C("estimate-model-empty", "estimate --model=", "--model needs a file name, got ''"),
    C("fit-plot-blank", "fit runs.csv --plot ' '", "--plot needs a file name"),
    C("fit-source-blank", "fit ' '", "`scalestudy fit` needs a file or directory name, got ' '"),
    C("report-directory-blank", "report ' '", "`scalestudy report` needs a file or directory name"),
    C("study-status-directory-empty", "study status ''", "`scalestudy study status` needs a file or directory name"),
    C("train-config-files-blank", "train --config cfg-files-blank.yaml --no-progress", "files needs a file name"),
    C("train-config-tokenizer-blank", "train --config cfg-tokenizer-blank.yaml --no-progress",
      "tokenizer needs a file name"),
    # a symbolic link loop where a command writes a file of its output folder: SQLite's open was a traceback
    C("study-run-store-link-loop", "study run good.yaml -o loop-store", "study.sqlite is a symbolic link loop"),
    C("search-store-link-loop", "search search.yaml -o loop-search", "search.sqlite is a symbolic link loop"),
    C("train-summary-link-loop", TRAIN.replace("OUT", "loop-run"), "summary.json is a symbolic link loop"),
]


def test_case_count_and_unique_ids():
    assert len(CASES) >= 150, len(CASES)
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def workspace(template, tmp_path_factory) -> Workspace:
    return Workspace(template, tmp_path_factory.mktemp("bad-inputs") / "ws")


def _run_case(case: Case, ws: Path, monkeypatch) -> tuple[dict, Result]:
    """The case's own files made in ws, its command run there: (ws's snapshot before, result)."""
    for rel, text in case_files(case.argv).items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(text) if isinstance(text, bytes) else (ws / rel).write_text(text)
    for name, target in LINKS.items():
        if any(name.split("/")[0] in arg for arg in case.argv):
            (ws / name).parent.mkdir(parents=True, exist_ok=True)
            (ws / name).symlink_to(target)
    for rel in FIFOS:
        if rel.split("/")[0] in case.argv:
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            os.mkfifo(ws / rel)
    for rel in case.immutable:  # a missing one is made: a file where the name has a suffix, else a directory
        if not (ws / rel).exists():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text("old\n") if (ws / rel).suffix else (ws / rel).mkdir()
    if case.immutable and not _chattr("+i", *(ws / r for r in case.immutable)):
        pytest.skip("chattr +i is not available here")
    monkeypatch.chdir(ws)
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse)
    monkeypatch.setattr(os, "fork", _refuse)
    monkeypatch.setenv("COLUMNS", "80")
    for name, value in case.env:
        monkeypatch.setenv(name, value)
    before = snapshot(ws)
    try:
        res = run_cli(list(case.argv))
    finally:
        monkeypatch.undo()
    return before, res


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_input(case: Case, workspace: Workspace, monkeypatch):
    ws = workspace.path
    try:
        before, res = _run_case(case, ws, monkeypatch)
    finally:  # whatever happened, the next case starts from the template's workspace (chattr: only where needed)
        if case.immutable:
            _chattr("-i", *(ws / r for r in case.immutable))
        after = snapshot(ws)
        workspace.restore(after)
    lines = [line for line in res.err.splitlines() if line.strip()]
    shown = f"exit {res.code}\nstderr:\n{res.err[-2000:]}\nstdout:\n{res.out[-1000:]}"
    assert "Traceback" not in res.err + res.out, shown
    assert res.code == 2, shown
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert case.expect.lower() in lines[0].lower(), shown
    changed = {k for k in before.keys() & after.keys() if before[k] != after[k]}
    assert (after.keys() - before.keys(), before.keys() - after.keys(), changed) == (set(), set(), set()), shown


def _numbers(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield obj


@pytest.mark.parametrize("cmd", [
    f"{EST} --pp 2 --stage-speeds 1,1 --stage-layers auto --json",  # equal speeds: the even split (was an error)
    f"{EST} --pp 2 --stage-speeds 1e-6,1 --stage-layers auto --json",
    f"{EST} --cluster mixed-ok.yaml --pp 2 --precision fp16 --stage-layers auto --json",
    f"{EST} --seq-len 100000000 --json",  # the span-corruption target length: was a 90 s token-by-token scan
    f"{EST} --train-tokens 1e300 --json",
    f"{PLAN} --cluster mixed-ok.yaml --pp 1 --precision fp16 --json --top 1",
], ids=lambda c: c.split(" --", 1)[1])
def test_edge_but_valid_inputs_give_finite_results(cmd, template, tmp_path, monkeypatch):
    """Valid edge values: a result, every number finite and non-negative (no NaN/inf/negative time), fast."""
    import json
    import shlex
    import time

    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    monkeypatch.chdir(ws)
    t0 = time.process_time()  # CPU time of this process: the bound is on the work, not on other jobs' load
    res = run_cli(shlex.split(cmd))
    assert time.process_time() - t0 < 10
    assert res.code == 0, res.err[-2000:]
    values = list(_numbers(json.loads(res.out)))
    assert values and all(math.isfinite(v) and v >= 0 for v in values), [v for v in values if not v >= 0]


@pytest.mark.parametrize("argv", [f"{EST} --cublas 10", f"{TRAIN} --set cublas=11 --print-launch --device cpu",
                                  "study run spec-cublas-number.yaml -o s --executor slurm --dry-run"],
                         ids=["estimate", "train-set", "study-train-options"])
def test_cublas_given_as_a_number_is_the_version(argv, template, tmp_path, monkeypatch):
    """YAML and --set read an unquoted 11 as a number: it was 'unknown cublas 11 (choose from 11, 10)'."""
    import shlex

    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    (ws / "spec-cublas-number.yaml").write_text(GOOD_SPEC + "train_options: {cublas: 11}\n")
    monkeypatch.chdir(ws)
    res = run_cli(shlex.split(argv))
    assert res.code in (0, None), res.err[-2000:]


def test_a_compute_law_plot_of_runs_without_sizes_prints_nothing_on_stderr(template, tmp_path, monkeypatch):
    """fuzz7: params 0 in a runs CSV (the compute law does not read them) printed numpy's 'divide by zero in log10'
    warning, two lines on stderr, while the plot coloured the runs by size."""
    import warnings

    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    (ws / "runs.csv").write_text("model,params,tokens,flops,loss\n" + "".join(
        f"m{i},0,1e8,{6e14 * (i + 1)},{4 - 0.1 * i}\n" for i in range(6)))
    monkeypatch.chdir(ws)
    with warnings.catch_warnings(record=True) as caught:  # pytest would take them off stderr
        warnings.simplefilter("always")
        res = run_cli(["fit", "runs.csv", "--law", "compute", "--bootstrap", "5", "--plot", "p.png"])
    assert res.code == 0 and res.err == "", res.err[-2000:]
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    assert (ws / "p.png").stat().st_size > 0


def test_a_file_cut_short_is_one_line_not_aborted(template, tmp_path, monkeypatch):
    """fuzz7: click turns any EOFError into Abort, which printed 'aborted' with Ctrl-C's exit status 130 (a resumed
    run's empty tokens.npz, read by np.load in the launcher): a damaged file, exit 2, one line saying so."""
    import scalestudy.specs.presets

    def cut_short(name):
        raise EOFError("No data left in file")

    monkeypatch.chdir(template)
    monkeypatch.setattr(scalestudy.specs.presets, "get_model", cut_short)
    res = run_cli(["estimate", "--model", "t5-tiny"])
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert res.code == 2 and len(lines) == 1 and "cut short or damaged): No data left" in lines[0], res.err


def test_plan_on_a_mixed_cluster_at_pp_1_prints_no_empty_split(template, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    monkeypatch.chdir(ws)
    monkeypatch.setenv("COLUMNS", "200")
    res = run_cli([*f"{PLAN} --cluster mixed-ok.yaml --pp 1 --precision fp16".split()])
    assert res.code == 0, res.err[-2000:]
    assert "winner's :" not in res.out and "the even split" not in res.out, res.out[-1500:]


@pytest.mark.parametrize("argv", [["study", "status", "study"], ["study", "export", "study", "-o", "out/t.csv"],
                                  ["study", "export", "study", "-o", "out/m.csv", "--table", "metrics"],
                                  ["fit", "study", "--law", "compute", "--bootstrap", "5"]], ids=" ".join)
def test_read_only_commands_work_on_a_study_they_cannot_write(argv, template, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    locked = (ws / "study", ws / "study" / "study.sqlite")
    if not _chattr("+i", *locked):
        pytest.skip("chattr +i is not available here")
    monkeypatch.chdir(ws)
    before = snapshot(ws / "study")
    try:
        res = run_cli(argv)
    finally:
        _chattr("-i", *locked)
    assert res.code == 0, res.err[-2000:]
    assert snapshot(ws / "study") == before  # not even a -wal/-shm beside the store
    if argv[1] == "export":
        assert (ws / argv[4]).read_text().count("\n") > 1


@pytest.mark.parametrize("argv", [["study", "status", "study"], ["study", "export", "study", "-o", "t.csv"],
                                  ["fit", "study", "--law", "compute", "--bootstrap", "5"], ["report", "study"]],
                         ids=" ".join)
def test_a_stray_wal_beside_a_store_gets_no_shm(argv, template, tmp_path, monkeypatch):
    """fuzz7: SQLite opens a store with a -wal beside it in WAL mode whatever its header says, so a read-only command
    on a rollback-journal store beside a stray -wal (another program's bytes, no frame to replay) left a -shm."""
    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    (ws / "study" / "study.sqlite-wal").write_bytes(os.urandom(8192))
    monkeypatch.chdir(ws)
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse)
    res = run_cli(argv)
    assert res.code == 0, res.err[-2000:]
    assert not (ws / "study" / "study.sqlite-shm").exists()


@pytest.mark.parametrize("argv", [["study", "run", "good.yaml", "-o", "study"], ["demo", "-o", "nostore"]],
                         ids=" ".join)
def test_a_study_held_by_a_running_runner_is_refused_untouched(argv, template, tmp_path, monkeypatch):
    import fcntl

    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    (ws / "good.yaml").write_text(GOOD_SPEC.replace("name: tiny", "name: fixture"))  # the stored study's name
    lock = ws / argv[-1] / ".runner.lock"
    lock.write_text("")
    monkeypatch.chdir(ws)
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse)
    before = snapshot(ws)
    with open(lock) as held:  # another runner's lock (flock is per open file)
        fcntl.flock(held, fcntl.LOCK_EX)
        res = run_cli(argv)
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert res.code == 2 and len(lines) == 1 and "another runner" in lines[0], res.err
    assert snapshot(ws) == before


def test_a_sweep_without_any_ok_trial_exits_1_with_one_line(template, tmp_path):
    """Every trial fails at once (a 64 MB address-space cap: Python cannot even start); real runner, subprocess."""
    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    (ws / "doomed.yaml").write_text(GOOD_SPEC.replace("name: tiny", "name: doomed") + "seed: [0, 1]\n"
                                    "memory_limit_bytes: 64000000\ntimeout_s: 60\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "scalestudy", "study", "run", "doomed.yaml", "-o", "s",
                           "--no-progress"], cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: no trial of study 'doomed' succeeded"), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("env, expect", [
    ({}, "torchrun worker"),  # started by hand: RANK, WORLD_SIZE, ... unset
    ({"RANK": "zero", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}, "whole"),
    ({"RANK": "3", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}, "RANK 3"),
    ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, "port"),
], ids=["unset", "rank-text", "rank-beyond-world", "port-70000"])
def test_a_training_worker_with_bad_torchrun_variables_says_so_in_one_line(env, expect, tmp_path, monkeypatch,
                                                                           capsys):
    """`python -m scalestudy.engine.train` outside torchrun, or with garbled variables: exit 2, one line, nothing
    started (was a ValueError traceback from int(), or the process group's own)."""
    from scalestudy.engine.train import TORCHRUN_VARIABLES, main as worker_main

    for name in TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse)
    (tmp_path / "train_config.yaml").write_text("model: {source: t5-tiny}\n")
    with pytest.raises(SystemExit) as exc:
        worker_main(["--config", str(tmp_path / "train_config.yaml")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert expect in lines[0], lines[0]


@pytest.mark.parametrize("argv, env", [
    (PLAN, {"COLUMNS": "0"}),
    (PLAN, {"COLUMNS": "100000"}),
    (f"{TRAIN} --print-launch --device cpu", {"WORLD_SIZE": "abc", "RANK": "-1", "LOCAL_RANK": "x",
                                              "MASTER_PORT": "abc"}),  # torchrun sets the workers' own
    ("estimate --model gpt2-tiny --gpu dev-markup.yaml", {}),
], ids=["columns-0", "columns-100000", "torchrun-variables-in-the-shell", "device-name-with-brackets"])
def test_edge_environments_and_names_still_work(argv, env, template, tmp_path, monkeypatch):
    """Values a command does not use or must print as text: exit 0, no traceback, a name in brackets printed whole
    (Rich would read '[bold]' as markup and drop it)."""
    import shlex

    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    (ws / "dev-markup.yaml").write_text(BARE_DEVICE.replace("name: bare", "name: '[bold]fast'")
                                        .replace("matmul_efficiency: []", "matmul_efficiency: [[1024, 0.5]]"))
    monkeypatch.chdir(ws)
    monkeypatch.setenv("COLUMNS", "200")  # the title line holding the name stays whole
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    res = run_cli(shlex.split(argv))
    assert res.code == 0 and "Traceback" not in res.err + res.out, res.err[-2000:]
    if "markup" in argv:
        assert "[bold]fast" in res.out, res.out[:1500]


def test_ctrl_c_in_a_command_is_one_line_and_status_130(monkeypatch):
    """Ctrl-C while a command runs: typer's main turned the KeyboardInterrupt into a bare 130, and nothing was
    printed (the terminal showed no reason); now one 'error:' line, no traceback, status 130."""
    from scalestudy.cli import _command

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(_command().commands["version"], "callback", interrupted)
    res = run_cli(["version"])
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert res.code == 130, res
    assert "Traceback" not in res.err + res.out and lines == ["error: interrupted (Ctrl-C)"], res


def test_ctrl_c_while_the_commands_load_is_one_line_and_status_130(monkeypatch):
    """Ctrl-C before any command runs (typer, rich and the command modules loading take seconds on a busy
    machine): it was a traceback."""
    import scalestudy.launch.process as process

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(process, "check_environment", interrupted)
    res = run_cli(["presets"])
    assert res.code == 130 and res.err.strip() == "error: interrupted (Ctrl-C)", res


@pytest.fixture
def full_disk(tmp_path):
    """A 256 KiB tmpfs filled to its last few KiB (root only: skipped where mount is refused)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with open(mnt / "filler", "wb") as f:
            with contextlib.suppress(OSError):
                f.write(b"\0" * (256 << 10))
        yield mnt
    finally:  # lazily where a file is still open in it (a failed case's store): never a mount left behind
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("argv, expect", [
    (["study", "run", "{ws}/good.yaml", "-o", "s"], "cannot write the study store"),  # was sqlite3's traceback
    (["plan", "--model", "t5-tiny", "--global-batch", "8", "--seq-len", "128", "--emit", "e"], "--emit e: cannot write"),
    (["fit", "{ws}/runs.csv", "--plot", "p.png"], "--plot p.png: cannot write it"),  # 'No space left on device' alone
    (["train", "--model", "t5-tiny", "--steps", "4", "--no-progress", "--output", "t"], "t/tokenizer.json: no space"),
], ids=["study-run", "plan-emit", "fit-plot", "train"])
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_nothing(argv, expect, full_disk, template, monkeypatch):
    """Out of space while the outputs are written: one line naming what could not be written, status 2, and no
    half-made output folder (a store, a lock, half of emit's configs and scripts) left behind."""
    monkeypatch.chdir(full_disk)
    res = run_cli([arg.replace("{ws}", str(template)) for arg in argv])
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert res.code == 2 and "Traceback" not in res.err, res
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect.lower() in lines[0].lower(), res
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"], res
