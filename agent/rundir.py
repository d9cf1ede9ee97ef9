"""A run directory: its own git repository, the journal, content-addressed artifacts, finding files.

Layout: ``log.jsonl`` (the journal), ``artifacts/<sha256[:16]>/<name>``, ``findings/NN-step.json|md``,
``PROFILE_FINDINGS.md`` and ``.html``, ``checkpoints.sqlite`` (LangGraph's, not committed), ``run.lock``.

Commits are a pure function of the findings: commit N holds the finding files 1..N, the artifacts
the log referenced up to finding N's event, and the log's lines up to that event; its author is
fixed and its date is that event's time. (From journal format 2 on, the last commit of an ended run
holds the journal through its run_end instead: see agent.commits.commit_specs.) So a replay
reproduces the commit ids, and syncing after a crash rewrites nothing that is already right and
never adds a commit twice.

Trees are written straight into the object store, never through an index file; the one index git
keeps (.git/index) is rewritten by git itself (read-tree) when the branch moves, so ``git status``
and ``git fsck`` hold in every run.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import git
from git.objects import Commit
from git.objects.fun import tree_to_stream
from gitdb import IStream

from agent.runlog import LOG_NAME, fault_point, prefix_bytes

AUTHOR = git.Actor("perf-investigator", "perf-investigator@localhost")
BRANCH = "main"
CHECKPOINTS = "checkpoints.sqlite"
LOCK = "run.lock"
REPORT = "PROFILE_FINDINGS.md"
HTML_REPORT = "PROFILE_FINDINGS.html"  # the same report as one page, plots inside (reports/html.py)
GATES_APPENDIX = "PROFILE_FINDINGS_GATES.md"  # the gates off the investigated path, listed in full (the report summarises them)
BUNDLE = "history.bundle"  # a shipped run's git history, where the run travels without its .git
_UNCOMMITTED = [f"/{CHECKPOINTS}*", f"/{LOCK}", "/replay.jsonl"]


class _Git(git.Git):
    """git's processes, each in a session of its own, as the box's tools are (agent.box.local): Ctrl-C
    signals the terminal's whole foreground process group, and the persistent ``git cat-file`` it
    killed broke the pipe of the commit that records the interrupt (issue 31). The agent alone
    answers a Ctrl-C; the git processes it runs finish what they were asked."""

    def execute(self, *args, **kwargs):
        kwargs.setdefault("start_new_session", True)
        return super().execute(*args, **kwargs)


class _Repo(git.Repo):
    GitCommandWrapperType = _Git


class RunDirError(RuntimeError):
    """The run directory cannot be made, locked or read; the message is one line."""


@dataclass(frozen=True)
class CommitSpec:
    """What one commit holds beyond its predecessor, and when and why it was made."""

    message: str
    files: dict[str, bytes]
    log_through_seq: int
    when: str  # ISO 8601 with offset, from the log


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def artifact_relpath(sha256: str, name: str) -> str:
    return f"artifacts/{sha256[:16]}/{Path(name).name}"


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_run_id(run_id: str) -> None:
    """A run id names one directory right under the runs directory: no separators, no ``..``, not
    absolute, not hidden. Raises RunDirError (one line) otherwise."""
    if not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise RunDirError(f"run id {run_id!r} is not a plain name (letters, digits, '.', '_', '-'; no '..', "
                          "no path separators, at most 200 characters)")


def inside(root: Path, path: Path) -> bool:
    """Whether ``path``, symlinks resolved, lies within ``root`` (resolved)."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def resolve_run(ref: str | Path, runs_dir: Path | None = None) -> Path:
    """The run directory a user named: a path to one, or a run id under ``runs_dir``.

    A path that exists wins; otherwise ``ref`` must be a plain run id and ``runs_dir/ref`` a run.
    Raises RunDirError (one line) naming where it looked."""
    path = Path(ref)
    if path.is_dir():
        return path
    name = str(ref)
    if runs_dir is not None and _RUN_ID.fullmatch(name) and ".." not in name:
        candidate = runs_dir / name
        if candidate.is_dir():
            return candidate
        raise RunDirError(f"no run {name!r}: neither a directory here nor a run under {runs_dir}")
    raise RunDirError(f"no run {name!r}: not a directory" + (f" (and not a run id under {runs_dir})" if runs_dir else ""))


def check_runs_dir(runs_dir: Path) -> None:
    """Fail early, in one line, when runs cannot be written there."""
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"runs directory {runs_dir} cannot be created: {exc.strerror}") from None
    if not runs_dir.is_dir() or not os.access(runs_dir, os.W_OK | os.X_OK):
        raise RunDirError(f"runs directory {runs_dir} is not writable")


class RunDir:
    def __init__(self, root: Path, repo: git.Repo | None = None):
        if repo is None and (root / ".git").is_dir():
            repo = _Repo(root)
        self.root = root
        self.repo = repo

    # -- creation and locking -------------------------------------------------------------

    @classmethod
    def create(cls, runs_dir: Path, run_id: str) -> "RunDir":
        check_run_id(run_id)
        check_runs_dir(runs_dir)
        root = runs_dir / run_id
        try:
            root.mkdir()
        except FileExistsError:
            raise RunDirError(f"run {root} already exists") from None
        if not inside(runs_dir, root):  # raced in through a symlink: nothing is written there
            raise RunDirError(f"run {root} would lie outside {runs_dir}")
        _Repo.init(root, initial_branch=BRANCH)
        with open(root / ".git" / "info" / "exclude", "a") as handle:
            handle.write("\n".join(_UNCOMMITTED) + "\n")
        (root / "artifacts").mkdir()
        (root / "findings").mkdir()
        return cls(root)

    @classmethod
    def open(cls, root: Path, recorded: bool = False) -> "RunDir":
        """A run to continue, or with ``recorded`` one only to read (a shipped run: its history
        in history.bundle instead of .git)."""
        if not (root / LOG_NAME).is_file():
            raise RunDirError(f"{root} is not a run directory (no {LOG_NAME})")
        if not (root / ".git").is_dir() and not (recorded and (root / BUNDLE).is_file()):
            raise RunDirError(f"{root} is not a run directory (no .git)")
        return cls(root)

    @property
    def log_path(self) -> Path:
        return self.root / LOG_NAME

    @property
    def checkpoints_path(self) -> Path:
        return self.root / CHECKPOINTS

    def lock(self) -> None:
        """Take the run's lock; a lock left by a dead process is taken over."""
        path = self.root / LOCK
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = lock_holder(self.root)
                if holder is not None:
                    raise RunDirError(f"run {self.root.name} is in use by process {holder}") from None
                path.unlink(missing_ok=True)
                continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            return
        raise RunDirError(f"cannot lock run {self.root.name}")

    def unlock(self) -> None:
        (self.root / LOCK).unlink(missing_ok=True)

    def restart_git(self) -> None:
        """Stop the git processes kept for reading objects; the next read starts new ones. After a Ctrl-C:
        the signal may have cut a question to one of them short, and its answer would answer the next."""
        if self.repo is not None:
            self.repo.git.clear_cache()

    # -- artifacts ---------------------------------------------------------------------------

    def _dest(self, rel: str) -> Path:
        """Where ``rel`` is written, its folder made; refused when a symlink would lead it out of the run."""
        dest = self.root / rel
        # checked before the folders are made, so that not even an empty folder lands outside
        if not inside(self.root, dest.parent) or (dest.is_symlink() and not inside(self.root, dest)):
            raise RunDirError(f"{rel} would be written outside run {self.root} (through a symlink)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        return dest

    def store_artifact(self, source: Path, name: str | None = None) -> dict:
        """Copy a file into the content-addressed store; returns its reference for the log."""
        name = Path(name or source.name).name
        digest = sha256_file(source)
        rel = artifact_relpath(digest, name)
        dest = self._dest(rel)
        if not dest.exists():
            tmp = dest.with_name(dest.name + ".tmp")
            shutil.copyfile(source, tmp)
            os.replace(tmp, dest)
        return {"name": name, "sha256": digest, "size": dest.stat().st_size, "path": rel}

    def store_bytes(self, data: bytes, name: str) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        rel = artifact_relpath(digest, name)
        dest = self._dest(rel)
        if not dest.exists():
            tmp = dest.with_name(dest.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
        return {"name": Path(name).name, "sha256": digest, "size": len(data), "path": rel}

    def artifact_path(self, ref: dict) -> Path:
        return self.root / ref["path"]

    # -- files and commits -----------------------------------------------------------------

    def write_file(self, rel: str, data: bytes) -> None:
        dest = self._dest(rel)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)

    def exclude(self, rel: str) -> None:
        """Keep ``rel`` out of ``git status``: a file the run writes but its journal's format never commits."""
        exclude = self.root / ".git" / "info" / "exclude"
        if f"/{rel}" not in exclude.read_text().splitlines():
            with open(exclude, "a") as handle:
                handle.write(f"/{rel}\n")

    def _blob(self, data: bytes) -> bytes:
        return self.repo.odb.store(IStream("blob", len(data), io.BytesIO(data))).binsha

    def _tree(self, files: dict[str, bytes]) -> bytes:
        """The tree object holding ``files`` (path -> bytes, all mode 100644), written to the object
        store directly; returns its binary sha."""
        nested: dict = {}
        for path, data in files.items():
            *folders, name = path.split("/")
            node = nested
            for folder in folders:
                node = node.setdefault(folder, {})
            node[name] = data
        return self._write_tree(nested)

    def _write_tree(self, node: dict) -> bytes:
        entries = []
        for name, value in node.items():
            if isinstance(value, dict):
                entries.append((self._write_tree(value), 0o040000, name))
            else:
                entries.append((self._blob(value), 0o100644, name))
        # git orders a tree's entries by name, a folder's name read as if it ended in "/"
        entries.sort(key=lambda e: e[2].encode() + (b"/" if e[1] == 0o040000 else b""))
        stream = io.BytesIO()
        tree_to_stream(entries, stream.write)
        data = stream.getvalue()
        return self.repo.odb.store(IStream("tree", len(data), io.BytesIO(data))).binsha

    def history(self) -> list[str]:
        """Commit ids on the branch, oldest first."""
        if self.repo is None:
            return bundle_history(self.root / BUNDLE)
        try:
            head = self.repo.heads[BRANCH].commit
        except (IndexError, ValueError):
            return []
        return [c.hexsha for c in reversed(list(self.repo.iter_commits(head)))]

    def committed(self, rel: str) -> bytes | None:
        """The file ``rel`` as the branch's last commit holds it (None: no commit, or no such file)."""
        if self.repo is None:
            return bundle_file(self.root / BUNDLE, rel)
        try:
            return (self.repo.heads[BRANCH].commit.tree / rel).data_stream.read()
        except (IndexError, ValueError, KeyError):
            return None

    def sync_commits(self, specs: list[CommitSpec], log_source: Path | None = None) -> list[str]:
        """Make the branch hold exactly one commit per spec, in order; returns their ids.

        Commits already right are kept; from the first that differs (a finding redone after a
        crash), the branch is rebuilt. ``log_source`` is the log whose prefixes go in (a replay
        commits the original's).
        """
        log_source = log_source or self.log_path
        existing = self.history()
        files: dict[str, bytes] = {}
        parent = None
        ids = []
        for position, spec in enumerate(specs):
            files.update(spec.files)
            files[LOG_NAME] = prefix_bytes(log_source, spec.log_through_seq)
            tree = git.Tree(self.repo, self._tree(files))
            when = datetime.fromisoformat(spec.when).replace(microsecond=0)
            commit = Commit.create_from_tree(
                self.repo, tree, spec.message, parent_commits=[parent] if parent else [], head=False,
                author=AUTHOR, committer=AUTHOR, author_date=when, commit_date=when,
            )
            ids.append(commit.hexsha)
            parent = commit
        fault_point(f"branch:{len(ids)}")  # the objects are written, the branch not yet moved
        if ids and ids != existing:
            self.repo.create_head(BRANCH, ids[-1], force=True)
        if ids and (ids != existing or not (Path(self.repo.git_dir) / "index").is_file()):
            # git writes its own index (to a lock file, then renamed): never a torn or empty one
            self.repo.git.read_tree(ids[-1])
        elif not ids and existing:  # a resume went back before the first finding
            self.repo.git.update_ref("-d", f"refs/heads/{BRANCH}")
            (Path(self.repo.git_dir) / "index").unlink(missing_ok=True)  # an unborn branch has none
        return ids


def bundle_history(bundle: Path) -> list[str]:
    """Commit ids of a bundle's main branch, oldest first (read through a scratch repository)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        repo = git.Repo.init(scratch)
        repo.git.fetch(str(bundle.resolve()), f"+refs/heads/{BRANCH}:refs/heads/{BRANCH}")
        return repo.git.rev_list("--reverse", BRANCH).split()


def bundle_file(bundle: Path, rel: str) -> bytes | None:
    """The file ``rel`` in the last commit of a bundle's main branch (None where it has none)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        repo = git.Repo.init(scratch)
        repo.git.fetch(str(bundle.resolve()), f"+refs/heads/{BRANCH}:refs/heads/{BRANCH}")
        try:
            return (repo.heads[BRANCH].commit.tree / rel).data_stream.read()
        except KeyError:
            return None


def export_run(run: RunDir, dest: Path) -> None:
    """A finished run as it ships (runs/examples): its files, and its history as history.bundle, so
    that it can be committed into another repository and still replayed and compared."""
    if dest.exists():
        raise RunDirError(f"{dest} already exists")
    dest.mkdir(parents=True)
    for name in (LOG_NAME, REPORT, HTML_REPORT, GATES_APPENDIX):
        if name in (HTML_REPORT, GATES_APPENDIX) and not (run.root / name).exists():  # a run older than the page, or without gates
            continue
        shutil.copyfile(run.root / name, dest / name)
    for folder in ("artifacts", "findings"):
        shutil.copytree(run.root / folder, dest / folder)
    run.repo.git.bundle("create", str((dest / BUNDLE).resolve()), BRANCH)


def lock_holder(root: Path) -> int | None:
    """PID of the live process holding a run's lock, if any."""
    try:
        pid = int((root / LOCK).read_text().strip() or "0")
    except (FileNotFoundError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return pid if exc.errno == errno.EPERM else None
    return pid
