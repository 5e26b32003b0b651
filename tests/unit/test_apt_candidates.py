"""apt-cache policy parsed into install candidates, on real outputs (tests/data/apt/)."""

from pathlib import Path

from gpunode.facts.apt import parse_apt_cache_policy

DATA = Path(__file__).parents[1] / "data" / "apt"


def test_candidates_from_a_node_with_package_lists():
    text = (DATA / "apt-cache-policy-bookworm.txt").read_text()
    # no-such-pkg-gpunode was asked for too: apt prints nothing for it on stdout.
    assert parse_apt_cache_policy(text) == {"pciutils": "1:3.9.0-4", "libpci3": "1:3.9.0-4"}


def test_no_candidate_after_the_package_was_removed_without_lists():
    text = (DATA / "apt-cache-policy-trixie-removed.txt").read_text()
    assert parse_apt_cache_policy(text) == {"pciutils": None}
