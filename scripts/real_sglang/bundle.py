"""Cut a set of wheels into parts that fit beside the tree on the device tool's calls, and put them back.

The device tool carries at most 64 MiB a call, the tracked tree included, and keeps git-ignored files on the
machine while it stays warm (30 s after a call): a wheel set larger than one call goes over as numbered parts,
one call after another, and the last call reassembles them. The wheels are first laid end to end in one
uncompressed tar (a wheel is a zip already), so that a part is full whatever the wheels' sizes; the manifest
holds the sha256 of every wheel, of the tar and of every part, and ``reassemble`` checks each before anything
is installed: a part left behind by a cold machine, or cut short in transfer, stops the install with its name.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

MANIFEST = "manifest.json"
CHUNK = 1 << 20


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


class Corrupt(RuntimeError):
    """A part or a wheel is missing or its sha256 is not the manifest's."""


def pack(wheels: list[Path], out: Path, part_bytes: int) -> dict:
    """Tar ``wheels`` (flat, by name), cut the tar into ``out/partNNN`` of at most ``part_bytes`` and write
    ``out/manifest.json``; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part*"):
        old.unlink()
    tar_path = out / "bundle.tar"
    with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
        for wheel in sorted(wheels, key=lambda p: p.name):
            tar.add(wheel, arcname=wheel.name)
    parts = []
    with open(tar_path, "rb") as handle:
        for index, block in enumerate(iter(lambda: handle.read(part_bytes), b"")):
            part = out / f"part{index:03d}"
            part.write_bytes(block)
            parts.append({"name": part.name, "bytes": len(block), "sha256": hashlib.sha256(block).hexdigest()})
    manifest = {"tar": {"bytes": tar_path.stat().st_size, "sha256": sha256(tar_path)}, "part_bytes": part_bytes,
                "parts": parts, "wheels": [{"name": w.name, "bytes": w.stat().st_size, "sha256": sha256(w)}
                                           for w in sorted(wheels, key=lambda p: p.name)]}
    tar_path.unlink()  # the parts are what travels; the tar is remade on the device
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def reassemble(folder: Path, dest: Path) -> list[Path]:
    """Check every part of ``folder`` against its manifest, join them into the tar, check it, unpack the wheels
    into ``dest`` and check each; returns the wheels' paths. Raises Corrupt naming the first thing that is off."""
    manifest = json.loads((folder / MANIFEST).read_text())
    dest.mkdir(parents=True, exist_ok=True)
    tar_path = dest / "bundle.tar"
    with open(tar_path, "wb") as joined:
        for part in manifest["parts"]:
            path = folder / part["name"]
            if not path.is_file():
                raise Corrupt(f"{part['name']} is missing (was the machine cold between calls?)")
            if path.stat().st_size != part["bytes"] or sha256(path) != part["sha256"]:
                raise Corrupt(f"{part['name']}: size or sha256 differs from the manifest")
            joined.write(path.read_bytes())
    if sha256(tar_path) != manifest["tar"]["sha256"]:
        raise Corrupt("the joined tar's sha256 differs from the manifest")
    with tarfile.open(tar_path) as tar:
        names = {w["name"] for w in manifest["wheels"]}
        members = [m for m in tar.getmembers() if m.isfile() and m.name in names and "/" not in m.name]
        tar.extractall(dest, members=members, filter="data")
    tar_path.unlink()
    wheels = []
    for wheel in manifest["wheels"]:
        path = dest / wheel["name"]
        if not path.is_file() or sha256(path) != wheel["sha256"]:
            raise Corrupt(f"{wheel['name']}: missing or its sha256 differs from the manifest")
        wheels.append(path)
    return wheels
