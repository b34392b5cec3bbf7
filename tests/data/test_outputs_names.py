"""Output names never lead out of the folder (nor into ``.ensml``), whatever text or template."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ensml.data.outputs import OutputFolder, distinct, format_name, normalise
from ensml.data.outputs.names import resolve
from ensml.errors import EnsmlError
from tests.data.outputs_sandbox import make_sandbox, snapshot

pytestmark = pytest.mark.timeout(120)

# Text made of the pieces that cause trouble, and anything else.
_PIECES = st.sampled_from(["..", ".", "/", "//", ".ensml", "link", "file", "sub", "\0", "~", "a", " ", "\\"])
NAMES = st.one_of(st.text(max_size=40), st.lists(_PIECES, max_size=8).map("".join))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a link out, a file, a sub-folder and a link inside."""
    base = tmp_path_factory.mktemp("names")
    root = base / "out"
    (root / "sub").mkdir(parents=True)
    (base / "elsewhere").mkdir()
    os.symlink(base / "elsewhere", root / "link")
    os.symlink(root / "sub", root / "inner_link")
    (root / "file").write_text("x")
    return Path(os.path.realpath(root))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES)
def test_arbitrary_text_never_resolves_outside(root: Path, name: str) -> None:
    try:
        key, path = resolve(root, name)
    except EnsmlError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("output name ")
        return
    real = Path(os.path.realpath(path))
    assert real.is_relative_to(root) and real != root
    assert not real.is_relative_to(root / ".ensml")
    assert key == normalise(key) and path == root / key


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "output name '' is empty"),
        ("./.", "output name './.' is empty"),
        ("/etc/passwd", "output name '/etc/passwd' is absolute; names are relative to out_dir"),
        ("../escape.nc", "output name '../escape.nc' leaves out_dir ('..')"),
        ("a/../../b", "output name 'a/../../b' leaves out_dir ('..')"),
        ("a\0b", "output name 'a\\x00b' holds a NUL character"),
        (".ensml/ledger.json", "output name '.ensml/ledger.json' is inside .ensml, ensml's own folder"),
        ("x" * 256, f"output name '{'x' * 256}' has a component longer than 255 bytes"),
        ("a\ud800b", "output name 'a\\ud800b' cannot be encoded as a file name"),
    ],
)
def test_bad_names(name: str, message: str) -> None:
    with pytest.raises(EnsmlError) as info:
        normalise(name)
    assert str(info.value) == message


def test_links_and_files_on_the_way(root: Path) -> None:
    with pytest.raises(EnsmlError) as info:
        resolve(root, "link/x.nc")
    assert str(info.value) == (
        f"output name 'link/x.nc': link is a symbolic link (to {root.parent}/elsewhere); "
        "ensml writes only real files inside out_dir"
    )
    with pytest.raises(EnsmlError, match="inner_link is a symbolic link"):
        resolve(root, "inner_link/x.nc")  # even one that stays inside: one name per file
    with pytest.raises(EnsmlError, match="output name 'link': link is a symbolic link"):
        resolve(root, "link")
    with pytest.raises(EnsmlError, match=r"output name 'file/x\.nc': file is a file, not a folder"):
        resolve(root, "file/x.nc")
    assert resolve(root, "./sub//x.nc") == ("sub/x.nc", root / "sub" / "x.nc")


def test_templates() -> None:
    init = datetime(2020, 1, 2, 12)
    assert format_name("forecast_{init:%Y%m%d}.nc", init=init) == "forecast_20200102.nc"
    assert format_name("{init:%Y}/{init:%m}/f_{init:%d%H}.nc", init=init) == "2020/01/f_0212.nc"
    cases = {
        "../escape_{init}.nc": "name template '../escape_{init}.nc' gives "
        "'../escape_2020-01-02 12:00:00.nc', which leaves out_dir ('..')",
        "/tmp/{init:%Y}.nc": "name template '/tmp/{init:%Y}.nc' gives '/tmp/2020.nc', which is absolute; "
        "names are relative to out_dir",
        "f_{date}.nc": "name template 'f_{date}.nc' uses an unknown field 'date' (known: init)",
        "f_{init:%Y}{}.nc": "name template 'f_{init:%Y}{}.nc' uses a field without a name (known: init)",
        "f_{init.hour.x}.nc": "name template 'f_{init.hour.x}.nc' cannot be formatted: 'int' object has no "
        "attribute 'x'",
    }
    for template, message in cases.items():
        with pytest.raises(EnsmlError) as info:
            format_name(template, init=init)
        assert str(info.value) == message


def test_two_outputs_with_one_name() -> None:
    assert distinct(["a.nc", "./b.nc"]) == ["a.nc", "b.nc"]
    with pytest.raises(EnsmlError) as info:
        distinct(["f.nc", "./f.nc"], {"f.nc": "init 2020-01-01", "./f.nc": "init 2020-01-02"})
    assert (
        str(info.value)
        == "two outputs would both be written to 'f.nc' (from init 2020-01-01 and init 2020-01-02)"
    )


def test_an_archive_template_cannot_write_outside(tmp_path: Path) -> None:
    home = make_sandbox(tmp_path / "home", tmp_path / "elsewhere")
    with OutputFolder.open(home / "archive", "archive") as folder:
        folder.write_bytes("2019.nc", b"archived")
    os.symlink(tmp_path / "elsewhere", home / "archive" / "outside")  # the user's link
    before = snapshot(tmp_path, skip=(home / "archive" / ".ensml",))
    templates = ("../escape_{init:%Y}.nc", "outside/{init:%Y}.nc", "{init:%Y}/../../x.nc", "/x{init:%Y}.nc")
    for template in templates:
        with pytest.raises(EnsmlError):
            name = format_name(template, init=datetime(2020, 1, 1))
            with OutputFolder.open(home / "archive", "archive", names=[name]) as folder:
                folder.write_bytes(name, b"escaped")
    with OutputFolder.open(home / "archive", "archive") as folder:
        with pytest.raises(EnsmlError, match=r"archive: output name 'out/\.\./\.\./x' leaves out_dir"):
            folder.write_bytes("out/../../x", b"escaped")
        with pytest.raises(
            EnsmlError, match=r"archive: output name 'outside/x\.nc': outside is a symbolic link"
        ):
            folder.write_bytes("outside/x.nc", b"escaped")
    assert snapshot(tmp_path, skip=(home / "archive" / ".ensml",)) == before
