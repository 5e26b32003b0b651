"""The lab image cache: one key per suite and build script; pruning stays inside one suite."""

from __future__ import annotations

import pytest

from lab import image


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(image.CACHE_ENV, str(tmp_path))
    (tmp_path / "images").mkdir()
    return tmp_path / "images"


def test_suite_defaults_to_trixie_and_is_checked(monkeypatch):
    monkeypatch.delenv(image.SUITE_ENV, raising=False)
    assert image.lab_suite() == "trixie"
    monkeypatch.setenv(image.SUITE_ENV, "bookworm")
    assert image.lab_suite() == "bookworm"
    monkeypatch.setenv(image.SUITE_ENV, "sid")
    with pytest.raises(image.LabImageError, match="trixie, bookworm"):
        image.lab_suite()


def test_key_names_the_suite_and_the_build_script(monkeypatch):
    trixie, bookworm = image.image_key("trixie"), image.image_key("bookworm")
    assert trixie.startswith("trixie-") and bookworm.startswith("bookworm-")
    assert trixie.split("-", 1)[1] == bookworm.split("-", 1)[1]  # same script, same hash
    monkeypatch.setenv(image.SUITE_ENV, "bookworm")
    assert image.current_image().path.name == bookworm


def test_pruning_one_suite_never_deletes_the_other(cache):
    keep = image.LabImage(cache / "trixie-0000000000000002")
    for name in ("trixie-0000000000000001", "bookworm-0000000000000001", keep.path.name):
        (cache / name).mkdir()
        (cache / f"{name}.build.log").write_text("log")
    image._prune_old_images(keep)
    assert sorted(p.name for p in cache.iterdir()) == [
        "bookworm-0000000000000001", "bookworm-0000000000000001.build.log",
        "trixie-0000000000000002", "trixie-0000000000000002.build.log",
    ]
